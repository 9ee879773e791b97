package token

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// maxJWKSBytes bounds what we read from the JWKS endpoint; real key sets are
// a few KiB.
const maxJWKSBytes = 1 << 20

// throttledClient is client with its JWKS fetches rate-limited.
//
// go-oidc's remote key set refetches the JWKS whenever a token's kid is
// unknown or its signature fails against the cached key: right for rotation,
// but it lets anyone who can reach /datafeed make weir fetch from the
// identity provider once per forged token. Within jwksMinInterval of the last
// fetch, the previous answer (keys or failure) is reused instead.
//
// The throttle is returned too, so that a verification failure can be told
// apart from the keys being unavailable.
func throttledClient(c *http.Client, jwksURL string, t tuning) (*http.Client, *jwksThrottle) {
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	// go-oidc compares nothing, it just requests jwksURL; compare in the
	// form the request will carry so that an escaping difference cannot
	// silently disable the throttle.
	if u, err := url.Parse(jwksURL); err == nil {
		jwksURL = u.String()
	}
	j := &jwksThrottle{next: next, url: jwksURL, every: t.jwksMinInterval, now: t.now}
	out := *c // shallow copy: the caller's client itself is left as it was
	out.Transport = j
	if out.Timeout == 0 {
		// go-oidc's key fetches cannot be cancelled (it detaches their
		// context), so without a client timeout one hung fetch would block
		// key refreshes for good.
		out.Timeout = t.discoveryTimeout
	}
	return &out, j
}

type jwksThrottle struct {
	next  http.RoundTripper
	url   string
	every time.Duration
	now   func() time.Time

	failing atomic.Bool // the last fetch failed; read without waiting for mu

	// mu is held across a fetch: go-oidc already runs one fetch at a time,
	// and a second caller should get the fresh answer, not start another.
	mu     sync.Mutex
	at     time.Time // when the last fetch ended; zero: never
	body   []byte
	header http.Header
	err    error
}

func (j *jwksThrottle) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || req.URL.String() != j.url {
		return j.next.RoundTrip(req)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.at.IsZero() && j.now().Sub(j.at) < j.every {
		if j.err != nil {
			return nil, fmt.Errorf("JWKS fetch failed less than %s ago, not retried yet: %w", j.every, j.err)
		}
		return j.response(req), nil
	}
	body, header, err := j.fetch(req)
	j.at = j.now()
	j.body, j.header, j.err = body, header, err
	j.failing.Store(err != nil)
	if err != nil {
		return nil, err
	}
	return j.response(req), nil
}

func (j *jwksThrottle) fetch(req *http.Request) ([]byte, http.Header, error) {
	resp, err := j.next.RoundTrip(req)
	if err != nil {
		return nil, nil, fmt.Errorf("fetch JWKS: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read JWKS: %w", err)
	}
	if len(body) > maxJWKSBytes {
		return nil, nil, fmt.Errorf("JWKS is larger than %d bytes", maxJWKSBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("fetch JWKS: %s", resp.Status)
	}
	return body, resp.Header.Clone(), nil
}

// response replays the last successful fetch; each caller gets its own body.
func (j *jwksThrottle) response(req *http.Request) *http.Response {
	return &http.Response{
		Status:        "200 OK",
		StatusCode:    http.StatusOK,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        j.header.Clone(),
		Body:          io.NopCloser(bytes.NewReader(j.body)),
		ContentLength: int64(len(j.body)),
		Request:       req,
	}
}
