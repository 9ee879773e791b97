package meta

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// OpState is the lifecycle state of an accepted-then-poll operation.
type OpState string

const (
	OpPending   OpState = "PENDING"   // accepted, waiting for a worker
	OpRunning   OpState = "RUNNING"   // claimed by Node until LeaseMs
	OpSucceeded OpState = "SUCCEEDED" // final: Result holds the outcome
	OpFailed    OpState = "FAILED"    // final: Error says why
	OpCancelled OpState = "CANCELLED" // final: cancelled before it finished
)

// Final reports whether no worker will change the operation any more.
func (s OpState) Final() bool { return s == OpSucceeded || s == OpFailed || s == OpCancelled }

// ErrLeaseLost is wrapped by errors for a renewal or finish of an operation
// that the caller no longer holds: it was cancelled, finished, or claimed
// by another worker after the caller's lease lapsed.
var ErrLeaseLost = errors.New("operation is no longer held by this worker")

// ErrFinal is wrapped by errors for a cancel of an operation that has
// already reached a final state.
var ErrFinal = errors.New("operation has already finished")

// Operation is one row of the operations table. Request and Result are JSON
// documents owned by the operation's kind; Done and Total are its progress.
type Operation struct {
	ID       string
	Kind     string
	State    OpState
	Owner    string // user name of the submitter
	Request  string // JSON
	Result   string // JSON; "{}" until it succeeds
	Error    string
	Done     int64
	Total    int64
	Node     string // the node that ran it last ("" until claimed)
	LeaseMs  int64  // while RUNNING: when the claim lapses and another worker may take over
	CreateMs int64
	UpdateMs int64
	FinishMs int64 // 0 until final
}

const operationColumns = `id, kind, state, owner, request, result, error, done, total, node, lease_ms, create_ms, update_ms, finish_ms`

func scanOperation(s rowScanner) (Operation, error) {
	var op Operation
	var state string
	if err := s.Scan(&op.ID, &op.Kind, &state, &op.Owner, &op.Request, &op.Result, &op.Error, &op.Done, &op.Total,
		&op.Node, &op.LeaseMs, &op.CreateMs, &op.UpdateMs, &op.FinishMs); err != nil {
		return Operation{}, err
	}
	op.State = OpState(state)
	return op, nil
}

// CreateOperation stores a new PENDING operation. ID, Kind and CreateMs
// must be set; an empty Request or Result is stored as "{}". A taken id
// gives an error wrapping ErrExists.
func (r *Repo) CreateOperation(ctx context.Context, op *Operation) error {
	switch {
	case op.ID == "":
		return errors.New("create operation: empty id")
	case op.Kind == "":
		return fmt.Errorf("create operation %s: empty kind", op.ID)
	case op.CreateMs == 0:
		return fmt.Errorf("create operation %s: no create time", op.ID)
	}
	if op.Request == "" {
		op.Request = "{}"
	}
	if op.Result == "" {
		op.Result = "{}"
	}
	op.State, op.UpdateMs = OpPending, op.CreateMs
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		// Checked first rather than matched on a driver's duplicate-key error,
		// which differs between the engines.
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM operations WHERE id = $1`, op.ID).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return ErrExists
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO operations (`+operationColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
			op.ID, op.Kind, string(op.State), op.Owner, op.Request, op.Result, op.Error, op.Done, op.Total,
			op.Node, op.LeaseMs, op.CreateMs, op.UpdateMs, op.FinishMs)
		return err
	})
	if err != nil {
		return fmt.Errorf("create operation %s: %w", op.ID, err)
	}
	return nil
}

// GetOperation returns the operation with this id, or an error wrapping
// ErrNotFound.
func (r *Repo) GetOperation(ctx context.Context, id string) (Operation, error) {
	op, err := scanOperation(r.db.QueryRowContext(ctx, `SELECT `+operationColumns+` FROM operations WHERE id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Operation{}, fmt.Errorf("get operation %s: %w", id, err)
	}
	return op, nil
}

// OperationFilter selects operations for ListOperations; zero fields do not
// filter.
type OperationFilter struct {
	Owner string
	Kind  string
	State OpState
	// Unfinished, when set, keeps only PENDING and RUNNING operations,
	// read in one statement (two lists, one per state, read one after the
	// other, both hold an operation that started in between).
	Unfinished bool
	// FinishedBefore, when set, keeps only operations that reached their
	// final state before it (Unix ms).
	FinishedBefore int64
	Limit          int // 0: no limit
}

// ListOperations returns the operations matching f, newest first.
func (r *Repo) ListOperations(ctx context.Context, f OperationFilter) ([]Operation, error) {
	var where []string
	var args []any
	add := func(cond string, arg any) {
		args = append(args, arg)
		where = append(where, cond+" = $"+strconv.Itoa(len(args)))
	}
	if f.Owner != "" {
		add("owner", f.Owner)
	}
	if f.Kind != "" {
		add("kind", f.Kind)
	}
	if f.State != "" {
		add("state", string(f.State))
	}
	if f.Unfinished {
		args = append(args, string(OpPending), string(OpRunning))
		where = append(where, "state IN ($"+strconv.Itoa(len(args)-1)+", $"+strconv.Itoa(len(args))+")")
	}
	if f.FinishedBefore > 0 {
		args = append(args, f.FinishedBefore)
		where = append(where, "finish_ms > 0 AND finish_ms < $"+strconv.Itoa(len(args)))
	}
	q := `SELECT ` + operationColumns + ` FROM operations`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY create_ms DESC, id DESC`
	if f.Limit > 0 {
		args = append(args, f.Limit)
		q += ` LIMIT $` + strconv.Itoa(len(args))
	}
	ops, err := r.queryOperations(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list operations: %w", err)
	}
	return ops, nil
}

func (r *Repo) queryOperations(ctx context.Context, q string, args ...any) ([]Operation, error) {
	return queryAll(ctx, r.db, scanOperation, q, args...)
}

// claimCandidates bounds how many claimable rows one ClaimOperation looks
// at: enough that a few lost races still find one, few enough to be cheap.
const claimCandidates = 8

// ClaimOperation makes node the runner of the oldest claimable operation of
// one of kinds: a PENDING one, or a RUNNING one whose lease lapsed before
// nowMs (its runner stopped or died). The claim sets state RUNNING, node
// and lease_ms = leaseMs in one conditional UPDATE that matches only the
// row as it was read, so when workers on several nodes race for a row
// exactly one of them wins; the losers move on to the next candidate.
// ok is false when there is nothing to claim.
func (r *Repo) ClaimOperation(ctx context.Context, node string, kinds []string, nowMs, leaseMs int64) (op Operation, ok bool, err error) {
	if len(kinds) == 0 {
		return Operation{}, false, nil
	}
	if leaseMs <= nowMs {
		return Operation{}, false, fmt.Errorf("claim operation: lease %d is not after now %d", leaseMs, nowMs)
	}
	args := []any{string(OpPending), string(OpRunning), nowMs}
	marks := make([]string, len(kinds))
	for i, k := range kinds {
		args = append(args, k)
		marks[i] = "$" + strconv.Itoa(len(args))
	}
	args = append(args, claimCandidates)
	cands, err := r.queryOperations(ctx, `SELECT `+operationColumns+` FROM operations
		WHERE (state = $1 OR (state = $2 AND lease_ms < $3)) AND kind IN (`+strings.Join(marks, ", ")+`)
		ORDER BY create_ms, id LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return Operation{}, false, fmt.Errorf("claim operation: list candidates: %w", err)
	}
	for _, c := range cands {
		var won bool
		err := r.withTx(ctx, func(tx *sql.Tx) error {
			// The WHERE clause is a compare-and-swap on what was read: a
			// concurrent claim changes state or lease_ms (a new lease is
			// always later than now, hence than any lapsed one), so at most
			// one UPDATE matches. PostgreSQL re-checks the condition after
			// waiting for a concurrent writer of the row; SQLite runs one
			// writer at a time.
			res, err := tx.ExecContext(ctx, `UPDATE operations SET state = $1, node = $2, lease_ms = $3, update_ms = $4
				WHERE id = $5 AND state = $6 AND lease_ms = $7 AND node = $8`,
				string(OpRunning), node, leaseMs, nowMs, c.ID, string(c.State), c.LeaseMs, c.Node)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			won = n == 1
			return err
		})
		if err != nil {
			return Operation{}, false, fmt.Errorf("claim operation %s: %w", c.ID, err)
		}
		if won {
			c.State, c.Node, c.LeaseMs, c.UpdateMs = OpRunning, node, leaseMs, nowMs
			return c, true, nil
		}
	}
	return Operation{}, false, nil
}

// RenewOperation extends the lease of a RUNNING operation that node holds
// with lease token heldLease (the lease_ms it last set) to newLease, and
// records progress. It fails with ErrLeaseLost when the operation is no
// longer node's with that lease: cancelled, or claimed by another worker.
func (r *Repo) RenewOperation(ctx context.Context, id, node string, heldLease, newLease, done, total, nowMs int64) error {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		return expectHeld(tx.ExecContext(ctx, `UPDATE operations SET lease_ms = $1, done = $2, total = $3, update_ms = $4
			WHERE id = $5 AND state = $6 AND node = $7 AND lease_ms = $8`,
			newLease, done, total, nowMs, id, string(OpRunning), node, heldLease))
	})
	if err != nil {
		return fmt.Errorf("renew operation %s: %w", id, err)
	}
	return nil
}

// FinishOperation records the outcome of a RUNNING operation that node
// holds with lease token heldLease: state SUCCEEDED (with result JSON) or
// FAILED (with errText), final progress and the finish time. It fails with
// ErrLeaseLost when the operation is no longer node's with that lease, so
// a worker that lost its claim never overwrites another's outcome or a
// cancellation.
func (r *Repo) FinishOperation(ctx context.Context, id, node string, heldLease int64, state OpState, result, errText string, done, total, nowMs int64) error {
	if state != OpSucceeded && state != OpFailed {
		return fmt.Errorf("finish operation %s: %s is not SUCCEEDED or FAILED", id, state)
	}
	if result == "" {
		result = "{}"
	}
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		return expectHeld(tx.ExecContext(ctx, `UPDATE operations SET state = $1, result = $2, error = $3, done = $4, total = $5,
				update_ms = $6, finish_ms = $6, lease_ms = 0
			WHERE id = $7 AND state = $8 AND node = $9 AND lease_ms = $10`,
			string(state), result, errText, done, total, nowMs, id, string(OpRunning), node, heldLease))
	})
	if err != nil {
		return fmt.Errorf("finish operation %s as %s: %w", id, state, err)
	}
	return nil
}

// expectHeld turns "no row changed" into ErrLeaseLost: the update matched
// only while this worker still held the operation's lease.
func expectHeld(res sql.Result, err error) error { return expectChange(res, err, ErrLeaseLost) }

// CancelOperation moves a PENDING or RUNNING operation to CANCELLED and
// returns it as it is afterwards. A RUNNING operation's worker finds out
// when it next renews its lease and stops. An operation that has already
// finished gives an error wrapping ErrFinal (and the operation); a missing
// one an error wrapping ErrNotFound.
func (r *Repo) CancelOperation(ctx context.Context, id string, nowMs int64) (Operation, error) {
	var op Operation
	var changed int64
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE operations SET state = $1, update_ms = $2, finish_ms = $2, lease_ms = 0
			WHERE id = $3 AND state IN ($4, $5)`,
			string(OpCancelled), nowMs, id, string(OpPending), string(OpRunning))
		if err != nil {
			return err
		}
		if changed, err = res.RowsAffected(); err != nil {
			return err
		}
		op, err = scanOperation(tx.QueryRowContext(ctx, `SELECT `+operationColumns+` FROM operations WHERE id = $1`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		return err
	})
	if err != nil {
		return Operation{}, fmt.Errorf("cancel operation %s: %w", id, err)
	}
	if changed == 0 {
		return op, fmt.Errorf("cancel operation %s: it is %s: %w", id, op.State, ErrFinal)
	}
	return op, nil
}

// DeleteOperation removes a finished operation's record. One that has not
// finished gives an error (cancel it first); a missing id wraps ErrNotFound.
func (r *Repo) DeleteOperation(ctx context.Context, id string) error {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM operations WHERE id = $1 AND state IN ($2, $3, $4)`,
			id, string(OpSucceeded), string(OpFailed), string(OpCancelled))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		var state string
		if err := tx.QueryRowContext(ctx, `SELECT state FROM operations WHERE id = $1`, id).Scan(&state); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return ErrNotFound
			}
			return err
		}
		return fmt.Errorf("it is %s, not finished", state)
	})
	if err != nil {
		return fmt.Errorf("delete operation %s: %w", id, err)
	}
	return nil
}
