package meta

import (
	"database/sql"
	"database/sql/driver"
	"testing"
)

// TestSQLiteWriterTempStore: write transactions run on the writer
// connection, which keeps temporary b-trees in memory; pooled (reader)
// connections keep SQLite's default.
func TestSQLiteWriterTempStore(t *testing.T) {
	r := openRepo(t, location{dataDir: t.TempDir()})
	ctx := t.Context()
	var inTx int
	if err := r.withTx(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, "PRAGMA temp_store").Scan(&inTx)
	}); err != nil {
		t.Fatal(err)
	}
	if inTx != 2 {
		t.Errorf("temp_store in a write transaction = %d, want 2 (MEMORY)", inTx)
	}
	var pooled int
	if err := r.db.QueryRowContext(ctx, "PRAGMA temp_store").Scan(&pooled); err != nil {
		t.Fatal(err)
	}
	if pooled != 0 {
		t.Errorf("temp_store on a pooled connection = %d, want 0 (the default)", pooled)
	}
}

// TestSQLiteWriterReplaced: when database/sql discards the writer
// connection after a driver error, the next write opens another one
// instead of failing for ever.
func TestSQLiteWriterReplaced(t *testing.T) {
	r := openRepo(t, location{dataDir: t.TempDir()})
	a := newStream("F", "n", "1")
	apply(t, r, &Batch{Create: []*Stream{a}})
	old := r.writer
	if old == nil {
		t.Fatal("no writer connection after a write")
	}
	// A driver error marks the connection bad; database/sql closes it and
	// every later use of the *sql.Conn returns sql.ErrConnDone.
	_ = old.Raw(func(any) error { return driver.ErrBadConn })
	b := newStream("F", "n", "2")
	apply(t, r, &Batch{Create: []*Stream{b}, Unlock: []*Stream{a}})
	if r.writer == old {
		t.Error("the discarded writer connection was not replaced")
	}
	if got, err := r.GetStream(t.Context(), a.ID); err != nil || got.Status != Unlocked {
		t.Errorf("stream %d after the writer was replaced: %+v, %v", a.ID, got, err)
	}
	if b.ID == 0 {
		t.Error("the write on the new connection set no id")
	}
}
