package main_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// schedulerLine returns the GOMAXPROCS weir serve ran with and the one the
// runtime gave it, from its debug log's "scheduler" line.
func schedulerLine(t *testing.T, logs string) (procs, was int) {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `"msg":"scheduler"`) {
			continue
		}
		var v struct {
			Procs int `json:"GOMAXPROCS"`
			Was   int `json:"started with"`
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("scheduler line %q: %v", line, err)
		}
		return v.Procs, v.Was
	}
	t.Fatalf("weir serve logged no scheduler line:\n%s", logs)
	return 0, 0
}

// TestServerSpareProcs: weir serve runs with two Ps more than the runtime
// gives it, and with exactly what GOMAXPROCS says when it is set.
func TestServerSpareProcs(t *testing.T) {
	e := newEnvConfig(t, "log:\n  level: debug\nreceive:\n  authenticationRequired: false\n")
	t.Setenv("GOMAXPROCS", "") // unset for the child, whatever runs the test
	srv := e.startServer()
	if procs, was := schedulerLine(t, srv.logs.String()); was < 1 || procs != was+2 {
		t.Errorf("without GOMAXPROCS: runs with %d, started with %d; want two more", procs, was)
	}
	srv.terminate()

	t.Setenv("GOMAXPROCS", "3")
	srv = e.startServer()
	if procs, was := schedulerLine(t, srv.logs.String()); procs != 3 || was != 3 {
		t.Errorf("with GOMAXPROCS=3: runs with %d, started with %d; want 3", procs, was)
	}
}
