package meta

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// TestOperations runs the operations table tests once per engine.
func TestOperations(t *testing.T) {
	for _, ec := range engineCases {
		t.Run(ec.name, func(t *testing.T) {
			tests := []struct {
				name string
				fn   func(t *testing.T, loc location)
			}{
				{"CreateGetList", testOperationCreateGetList},
				{"ClaimExclusive", testOperationClaimExclusive},
				{"LeaseExpiry", testOperationLeaseExpiry},
				{"Cancel", testOperationCancel},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, ec.fresh(t))
				})
			}
		})
	}
}

func newOp(t *testing.T, r *Repo, id, kind, owner string, createMs int64) {
	t.Helper()
	if err := r.CreateOperation(t.Context(), &Operation{ID: id, Kind: kind, Owner: owner, CreateMs: createMs,
		Request: `{"n":1}`}); err != nil {
		t.Fatalf("CreateOperation %s: %v", id, err)
	}
}

func opIDs(ops []Operation) []string {
	out := []string{}
	for _, op := range ops {
		out = append(out, op.ID)
	}
	return out
}

func testOperationCreateGetList(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	newOp(t, r, "op-1", "export", "alice", 1000)
	newOp(t, r, "op-2", "import", "bob", 2000)
	newOp(t, r, "op-3", "export", "alice", 3000)
	err := r.CreateOperation(ctx, &Operation{ID: "op-1", Kind: "export", CreateMs: 1})
	if !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate id: %v, want ErrExists", err)
	}
	for _, bad := range []Operation{{Kind: "k", CreateMs: 1}, {ID: "x", CreateMs: 1}, {ID: "x", Kind: "k"}} {
		if err := r.CreateOperation(ctx, &bad); err == nil {
			t.Errorf("CreateOperation(%+v) succeeded", bad)
		}
	}

	op, err := r.GetOperation(ctx, "op-1")
	if err != nil {
		t.Fatal(err)
	}
	want := Operation{ID: "op-1", Kind: "export", State: OpPending, Owner: "alice", Request: `{"n":1}`, Result: "{}",
		CreateMs: 1000, UpdateMs: 1000}
	if op != want {
		t.Fatalf("GetOperation\n got %+v\nwant %+v", op, want)
	}
	if _, err := r.GetOperation(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing operation: %v", err)
	}

	for _, tc := range []struct {
		f    OperationFilter
		want []string
	}{
		{OperationFilter{}, []string{"op-3", "op-2", "op-1"}},
		{OperationFilter{Owner: "alice"}, []string{"op-3", "op-1"}},
		{OperationFilter{Owner: "alice", Limit: 1}, []string{"op-3"}},
		{OperationFilter{Kind: "import"}, []string{"op-2"}},
		{OperationFilter{State: OpRunning}, []string{}},
		{OperationFilter{Owner: "carol"}, []string{}},
	} {
		ops, err := r.ListOperations(ctx, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if got := opIDs(ops); !slices.Equal(got, tc.want) {
			t.Errorf("ListOperations(%+v) = %v, want %v", tc.f, got, tc.want)
		}
	}

	// Unfinished: PENDING and RUNNING, in one list, each once.
	if _, ok, err := r.ClaimOperation(ctx, "n1", []string{"export"}, 4000, 60000); err != nil || !ok {
		t.Fatalf("ClaimOperation: %v %v", ok, err)
	}
	if _, err := r.CancelOperation(ctx, "op-2", 4000); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f    OperationFilter
		want []string
	}{
		{OperationFilter{Owner: "alice", Unfinished: true}, []string{"op-3", "op-1"}},
		{OperationFilter{Unfinished: true}, []string{"op-3", "op-1"}},
		{OperationFilter{Owner: "bob", Unfinished: true}, []string{}},
		{OperationFilter{Unfinished: true, State: OpRunning}, nil},
	} {
		ops, err := r.ListOperations(ctx, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		got := opIDs(ops)
		if tc.want == nil {
			// One of the two, the one that was claimed.
			if len(got) != 1 || ops[0].State != OpRunning {
				t.Errorf("ListOperations(%+v) = %v, want the running one", tc.f, got)
			}
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ListOperations(%+v) = %v, want %v", tc.f, got, tc.want)
		}
	}
}

// testOperationClaimExclusive races workers on two repositories (two
// processes' connection pools on one database) for the same operations:
// each operation must be claimed exactly once.
func testOperationClaimExclusive(t *testing.T, loc location) {
	ctx := t.Context()
	r1, r2 := openRepo(t, loc), openRepo(t, loc)
	const n = 40
	for i := range n {
		newOp(t, r1, fmt.Sprintf("op-%03d", i), "export", "alice", int64(1000+i))
	}
	newOp(t, r1, "other-kind", "search", "alice", 1)

	var mu sync.Mutex
	claimedBy := map[string][]string{}
	var wg sync.WaitGroup
	var errs []error
	for w := range 6 {
		r := []*Repo{r1, r2}[w%2]
		node := fmt.Sprintf("node-%d", w)
		wg.Go(func() {
			for {
				op, ok, err := r.ClaimOperation(ctx, node, []string{"export", "import"}, 5000, 65000)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				if !ok {
					return
				}
				if op.State != OpRunning || op.Node != node || op.LeaseMs != 65000 {
					mu.Lock()
					errs = append(errs, fmt.Errorf("claimed %+v", op))
					mu.Unlock()
				}
				mu.Lock()
				claimedBy[op.ID] = append(claimedBy[op.ID], node)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	if len(claimedBy) != n {
		t.Fatalf("%d operations claimed, want %d", len(claimedBy), n)
	}
	for id, nodes := range claimedBy {
		if len(nodes) != 1 {
			t.Errorf("%s claimed by %v", id, nodes)
		}
		op, err := r2.GetOperation(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if op.State != OpRunning || op.Node != nodes[0] {
			t.Errorf("%s stored as %s on %q, claimed by %s", id, op.State, op.Node, nodes[0])
		}
	}
	if op, _ := r1.GetOperation(ctx, "other-kind"); op.State != OpPending {
		t.Errorf("an operation of an unrequested kind was claimed: %+v", op)
	}
}

// testOperationLeaseExpiry: a RUNNING operation is claimable again only
// once its lease lapsed; the worker that lost it can neither renew nor
// finish it, and the new holder can.
func testOperationLeaseExpiry(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	newOp(t, r, "op-a", "export", "alice", 100)
	kinds := []string{"export"}

	op, ok, err := r.ClaimOperation(ctx, "node-1", kinds, 1000, 2000)
	if err != nil || !ok || op.ID != "op-a" {
		t.Fatalf("first claim: %+v %v %v", op, ok, err)
	}
	if _, ok, err := r.ClaimOperation(ctx, "node-2", kinds, 1500, 2500); err != nil || ok {
		t.Fatalf("claim within the lease: ok=%v err=%v", ok, err)
	}
	// node-1 renews (with progress): the lease moves on.
	if err := r.RenewOperation(ctx, "op-a", "node-1", 2000, 3000, 5, 10, 1900); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if _, ok, _ := r.ClaimOperation(ctx, "node-2", kinds, 2500, 3500); ok {
		t.Fatal("claimed an operation whose lease was renewed")
	}
	// A renewal with a stale token fails.
	if err := r.RenewOperation(ctx, "op-a", "node-1", 2000, 4000, 6, 10, 2000); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("renew with a stale lease: %v", err)
	}
	// node-1 stops renewing; after the lease lapses node-2 takes over.
	op, ok, err = r.ClaimOperation(ctx, "node-2", kinds, 3001, 9000)
	if err != nil || !ok || op.Node != "node-2" || op.Done != 5 || op.Total != 10 {
		t.Fatalf("reclaim after the lease lapsed: %+v %v %v", op, ok, err)
	}
	if err := r.RenewOperation(ctx, "op-a", "node-1", 3000, 5000, 7, 10, 3100); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("old holder renews: %v", err)
	}
	if err := r.FinishOperation(ctx, "op-a", "node-1", 3000, OpSucceeded, `{"old":true}`, "", 10, 10, 3200); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("old holder finishes: %v", err)
	}
	if err := r.FinishOperation(ctx, "op-a", "node-2", 9000, OpSucceeded, `{"files":1}`, "", 10, 10, 3300); err != nil {
		t.Fatalf("new holder finishes: %v", err)
	}
	op, err = r.GetOperation(ctx, "op-a")
	if err != nil {
		t.Fatal(err)
	}
	want := Operation{ID: "op-a", Kind: "export", State: OpSucceeded, Owner: "alice", Request: `{"n":1}`,
		Result: `{"files":1}`, Done: 10, Total: 10, Node: "node-2", CreateMs: 100, UpdateMs: 3300, FinishMs: 3300}
	if op != want {
		t.Fatalf("finished\n got %+v\nwant %+v", op, want)
	}
	// Final operations are never claimed again, however old.
	if _, ok, _ := r.ClaimOperation(ctx, "node-3", kinds, 1<<50, 1<<50+1); ok {
		t.Fatal("claimed a finished operation")
	}
	if err := r.FinishOperation(ctx, "op-a", "node-2", 0, OpCancelled, "", "", 0, 0, 1); err == nil {
		t.Fatal("finish as CANCELLED accepted")
	}
}

func testOperationCancel(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	newOp(t, r, "pending", "export", "alice", 100)
	newOp(t, r, "running", "export", "alice", 200)
	newOp(t, r, "failed", "export", "alice", 300)
	kinds := []string{"export"}

	op, err := r.CancelOperation(ctx, "pending", 1000)
	if err != nil || op.State != OpCancelled || op.FinishMs != 1000 {
		t.Fatalf("cancel pending: %+v %v", op, err)
	}
	op, ok, err := r.ClaimOperation(ctx, "node-1", kinds, 1100, 5000)
	if err != nil || !ok || op.ID != "running" {
		t.Fatalf("claim skips the cancelled one: %+v %v %v", op, ok, err)
	}
	if op, err = r.CancelOperation(ctx, "running", 1200); err != nil || op.State != OpCancelled {
		t.Fatalf("cancel running: %+v %v", op, err)
	}
	// Its worker learns of it on its next renewal, and cannot record an outcome.
	if err := r.RenewOperation(ctx, "running", "node-1", 5000, 6000, 1, 2, 1300); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("renew cancelled: %v", err)
	}
	if err := r.FinishOperation(ctx, "running", "node-1", 5000, OpSucceeded, "", "", 2, 2, 1300); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("finish cancelled: %v", err)
	}
	op, ok, err = r.ClaimOperation(ctx, "node-1", kinds, 1400, 5000)
	if err != nil || !ok || op.ID != "failed" {
		t.Fatalf("claim third: %+v %v %v", op, ok, err)
	}
	if err := r.FinishOperation(ctx, "failed", "node-1", 5000, OpFailed, "", "bad zip", 0, 0, 1500); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"failed", "pending"} {
		op, err := r.CancelOperation(ctx, id, 2000)
		if !errors.Is(err, ErrFinal) || op.ID != id || op.FinishMs == 2000 {
			t.Errorf("cancel finished %s: %+v %v", id, op, err)
		}
	}
	if _, err := r.CancelOperation(ctx, "nope", 2000); !errors.Is(err, ErrNotFound) {
		t.Errorf("cancel missing: %v", err)
	}
	if op, _ := r.GetOperation(ctx, "failed"); op.State != OpFailed || op.Error != "bad zip" {
		t.Errorf("failed operation changed: %+v", op)
	}
}
