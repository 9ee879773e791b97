package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// rawClient is a minimal HTTP/1.1 client for posts: keep-alive connections
// from a pool (most recently used first, like net/http's), the request head
// rendered once, the body written straight from the generator, and just
// enough of the answer parsed to know its status, its Service-Error and
// where it ends. It costs several times less CPU per post than net/http's
// client, which matters when generator and server share two cores; -client
// net/http uses the standard client instead.
type rawClient struct {
	addr    string
	head    []byte // request line and fixed headers, without the length header and the blank line
	timeout time.Duration

	mu   sync.Mutex
	idle []*rawConn
}

type rawConn struct {
	c       net.Conn
	br      *bufio.Reader
	bw      *bufio.Writer
	scratch []byte
}

func newRawClient(u *url.URL, h http.Header, timeout time.Duration) (*rawClient, error) {
	if u.Scheme != "http" {
		return nil, errors.New("the raw client speaks plain http only; use -client net/http for https")
	}
	host := u.Host
	addr := host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\n", u.RequestURI(), host)
	if err := h.Write(&b); err != nil {
		return nil, err
	}
	return &rawClient{addr: addr, head: b.Bytes(), timeout: timeout}, nil
}

func (rc *rawClient) get() (*rawConn, error) {
	rc.mu.Lock()
	if n := len(rc.idle); n > 0 {
		c := rc.idle[n-1]
		rc.idle = rc.idle[:n-1]
		rc.mu.Unlock()
		return c, nil
	}
	rc.mu.Unlock()
	c, err := net.DialTimeout("tcp", rc.addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return &rawConn{c: c, br: bufio.NewReaderSize(c, 16<<10), bw: bufio.NewWriterSize(c, 64<<10), scratch: make([]byte, 64<<10)}, nil
}

func (rc *rawClient) put(c *rawConn) {
	rc.mu.Lock()
	rc.idle = append(rc.idle, c)
	rc.mu.Unlock()
}

// answer is what was read of a response.
type answer struct {
	status       int
	serviceError string
}

// post sends body (length bytes, or chunked in pieces of at most chunk
// bytes when chunk > 0) and reads the answer.
func (rc *rawClient) post(body io.Reader, length int64, chunk int) (answer, error) {
	c, err := rc.get()
	if err != nil {
		return answer{}, err
	}
	if rc.timeout > 0 {
		_ = c.c.SetDeadline(time.Now().Add(rc.timeout))
	}
	werr := c.writeRequest(rc.head, body, length, chunk)
	a, keep, rerr := c.readAnswer()
	if werr != nil && rerr != nil {
		// The server may have answered and closed before taking the whole
		// body (a refusal); then the answer is what counts.
		c.c.Close()
		return answer{}, werr
	}
	if rerr != nil {
		c.c.Close()
		return answer{}, rerr
	}
	if werr != nil || !keep {
		c.c.Close()
	} else {
		rc.put(c)
	}
	return a, nil
}

func (c *rawConn) writeRequest(head []byte, body io.Reader, length int64, chunk int) error {
	bw := c.bw
	bw.Write(head)
	if chunk > 0 {
		bw.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		buf := c.scratch[:min(chunk, len(c.scratch))]
		if chunk > len(c.scratch) {
			c.scratch = make([]byte, chunk)
			buf = c.scratch
		}
		var hex [20]byte
		for {
			n, err := io.ReadFull(body, buf)
			if n > 0 {
				bw.Write(strconv.AppendInt(hex[:0], int64(n), 16))
				bw.WriteString("\r\n")
				bw.Write(buf[:n])
				if _, werr := bw.WriteString("\r\n"); werr != nil {
					return werr
				}
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				break
			}
			if err != nil {
				return err
			}
		}
		bw.WriteString("0\r\n\r\n")
		return bw.Flush()
	}
	bw.WriteString("Content-Length: ")
	bw.Write(strconv.AppendInt(c.scratch[:0], length, 10))
	bw.WriteString("\r\n\r\n")
	for {
		n, err := body.Read(c.scratch)
		if n > 0 {
			if _, werr := bw.Write(c.scratch[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	return bw.Flush()
}

var (
	hContentLength    = []byte("content-length")
	hTransferEncoding = []byte("transfer-encoding")
	hConnection       = []byte("connection")
	hServiceError     = []byte("service-error")
)

// readAnswer reads a response to its end; keep is whether the connection
// can carry another request.
func (c *rawConn) readAnswer() (a answer, keep bool, err error) {
	br := c.br
	line, err := br.ReadSlice('\n')
	if err != nil {
		return a, false, err
	}
	// "HTTP/1.1 200 OK"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return a, false, fmt.Errorf("bad status line %q", line)
	}
	a.status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return a, false, fmt.Errorf("bad status line %q", line)
	}
	keep = line[7] == '1'
	length, chunked := int64(-1), false
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return a, false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, hContentLength):
			length, err = strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return a, false, fmt.Errorf("bad Content-Length %q", v)
			}
		case bytes.EqualFold(k, hTransferEncoding):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		case bytes.EqualFold(k, hConnection):
			if bytes.EqualFold(v, []byte("close")) {
				keep = false
			}
		case bytes.EqualFold(k, hServiceError):
			a.serviceError = string(v)
		}
	}
	switch {
	case chunked:
		for {
			line, err = br.ReadSlice('\n')
			if err != nil {
				return a, false, err
			}
			size := bytes.TrimRight(line, "\r\n")
			if i := bytes.IndexByte(size, ';'); i >= 0 {
				size = size[:i]
			}
			n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
			if err != nil {
				return a, false, fmt.Errorf("bad chunk size %q", line)
			}
			if n == 0 {
				for { // trailer
					line, err = br.ReadSlice('\n')
					if err != nil {
						return a, false, err
					}
					if len(bytes.TrimRight(line, "\r\n")) == 0 {
						return a, keep, nil
					}
				}
			}
			if _, err := br.Discard(int(n) + 2); err != nil {
				return a, false, err
			}
		}
	case length >= 0:
		if _, err := br.Discard(int(length)); err != nil {
			return a, false, err
		}
		return a, keep, nil
	default:
		_, err = io.Copy(io.Discard, br)
		return a, false, err
	}
}
