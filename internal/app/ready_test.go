package app

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A readiness failure is logged when it starts, then only when its text
// changes and no more than once per readinessLogInterval; the recovery is
// logged once.
func TestReadinessLogIsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var l readinessLog
	t0 := time.Unix(1_700_000_000, 0)
	errA, errB := errors.New("dial tcp db.internal:5432: connection refused"), errors.New("password authentication failed for user weir")
	steps := []struct {
		err    error
		at     time.Duration
		logged string // what this observation logs, "" for nothing
	}{
		{nil, 0, ""},
		{errA, time.Second, "db.internal"},
		{errA, 2 * time.Second, ""},
		{errB, 3 * time.Second, ""}, // changed, but too soon after the last line
		{errB, time.Second + readinessLogInterval, "password authentication"},
		{errB, 2 * readinessLogInterval, ""},
		{nil, 3 * readinessLogInterval, "answers again"},
		{nil, 4 * readinessLogInterval, ""},
		{errA, 4*readinessLogInterval + time.Second, "db.internal"}, // a new failure: at once
	}
	for i, st := range steps {
		buf.Reset()
		l.observe(log, st.err, t0.Add(st.at))
		got := buf.String()
		switch {
		case st.logged == "" && got != "":
			t.Errorf("step %d: logged %q, want nothing", i, got)
		case st.logged != "" && !strings.Contains(got, st.logged):
			t.Errorf("step %d: logged %q, want a line with %q", i, got, st.logged)
		case st.err != nil && got != "" && !strings.Contains(got, "level=WARN"):
			t.Errorf("step %d: logged %q, want WARN", i, got)
		}
	}
}
