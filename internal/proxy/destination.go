// Package proxy is `weir proxy`'s store-and-forward engine. Received posts
// are streams in the same durable store the main service uses (so a
// receipt means fsynced, group-committed data, and a crash recovers the
// same way); the proxy gathers them into aggregates per feed and type,
// and forwards each aggregate to every destination as a Stroom-format zip,
// with retries, a failure area and replay. All forwarding state is rows
// in the metadata database, changed in transactions, so a SIGKILL at any
// point leaves every acknowledged post either queued or delivered.
package proxy

import (
	"context"
	"io"
	"time"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/meta"
)

// Destination is where aggregates go: a downstream /datafeed or a directory.
type Destination interface {
	Name() string
	// Target names where it sends, for logs (a URL or a path).
	Target() string
	// Send delivers one aggregate whose zip body write produces; attrs
	// are the aggregate's common attributes (sent as headers).
	Send(ctx context.Context, a meta.Aggregate, attrs *attr.Map, write func(io.Writer) error) Outcome
	// Live reports whether the destination can take data now; nil when it
	// has no liveness check.
	Live(ctx context.Context) error
	// HasLiveness reports whether Live checks anything.
	HasLiveness() bool
}

// Outcome is how one attempt to send ended.
type Outcome struct {
	OK         bool
	Permanent  bool          // retrying cannot help: to the failure area
	HTTPStatus int           // 0 when no HTTP answer
	Code       int           // datafeed status code (0 on success)
	Message    string        // the downstream's message, or the error
	Receipt    string        // the downstream's receipt id
	RetryAfter time.Duration // the downstream asked to wait this long
	Bytes      int64         // bytes sent
	Duration   time.Duration
	Err        error // a local or transport failure
	// Resent says why the aggregate was sent twice in this attempt (a
	// zip of S2 entries refused by a downstream that no longer reads
	// them), for the send log; "" when it was sent once.
	Resent string
}
