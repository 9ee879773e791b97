package repeatlog

import (
	"testing"
	"time"
)

func TestFailures(t *testing.T) {
	f := New(time.Minute)
	if log, _ := f.Succeeded(); log {
		t.Error("a success with no failure before it is logged")
	}
	t0 := time.Unix(1000, 0)
	if log, n := f.Failed(t0); !log || n != 0 {
		t.Errorf("first failure: log %v, %d not logged; want true, 0", log, n)
	}
	for i := range 5 {
		if log, _ := f.Failed(t0.Add(time.Duration(i+1) * time.Second)); log {
			t.Errorf("failure %d within the interval is logged", i+2)
		}
	}
	if log, n := f.Failed(t0.Add(time.Minute)); !log || n != 5 {
		t.Errorf("failure a minute later: log %v, %d not logged; want true, 5", log, n)
	}
	f.Failed(t0.Add(time.Minute + time.Second))
	if log, n := f.Succeeded(); !log || n != 1 {
		t.Errorf("recovery: log %v, %d not logged; want true, 1", log, n)
	}
	if log, _ := f.Succeeded(); log {
		t.Error("the recovery is logged twice")
	}
	if log, n := f.Failed(t0.Add(time.Minute + 2*time.Second)); !log || n != 0 {
		t.Errorf("a failure after the recovery: log %v, %d not logged; want true, 0", log, n)
	}
}

// TestFailuresClockBack: times earlier than the last one logged (a wall
// clock stepped back, for a caller without a monotonic reading) log the
// failure rather than silence it until the clock catches up.
func TestFailuresClockBack(t *testing.T) {
	f := New(time.Minute)
	t0 := time.Unix(1000, 0)
	f.Failed(t0)
	if log, n := f.Failed(t0.Add(-time.Hour)); !log || n != 0 {
		t.Errorf("a failure an hour before the last logged: log %v, %d; want true, 0", log, n)
	}
	if log, _ := f.Failed(t0.Add(-time.Hour + time.Second)); log {
		t.Error("the next failure within the interval is logged")
	}
}
