package streamquery

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	_ "modernc.org/sqlite" // registers "sqlite" for running compiled conditions
)

// FuzzParseJSON: any input either fails with a located *Error or parses to
// an expression that compiles, on both dialects, to SQL whose placeholders
// match its arguments exactly, that holds no value text, and that SQLite
// accepts and runs against a streams table.
func FuzzParseJSON(f *testing.F) {
	seeds := []string{
		`null`, `{}`, `[]`, `{"type":"operator"}`,
		op("AND", term_("Feed", "EQUALS", "A*"), term_("Id", "IN", "1,2,3")),
		op("OR", term_("attribute:x", "BETWEEN", "1,9"), term_("attribute:d", "GREATER_THAN", "2024-01-01T00:00:00.000Z")),
		op("NOT", term_("attribute:s", "ENDS_WITH", "'; DROP TABLE streams; --"), term_("Receipt Id", "STARTS_WITH", "$1")),
		term_("Create Time", "BETWEEN", "0,1"), term_("Status", "IN", "unlocked,Locked"),
		term_("attribute:ü", "CONTAINS", "ß"), term_("Type", "IS_NOT_NULL", ""),
		`{"type":"operator","op":"OR","enabled":false,"children":[{"type":"term","field":"Id","condition":"EQUALS","value":"x"}]}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		f.Fatal(err)
	}
	db.SetMaxOpenConns(1) // one connection: one in-memory database
	f.Cleanup(func() { db.Close() })
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE streams (id INTEGER PRIMARY KEY, feed TEXT NOT NULL, type TEXT NOT NULL,
		status TEXT NOT NULL, create_ms INTEGER NOT NULL, effective_ms INTEGER NOT NULL, status_ms INTEGER NOT NULL,
		receipt_id TEXT NOT NULL, parts INTEGER NOT NULL, raw_size INTEGER NOT NULL, file_size INTEGER NOT NULL,
		attributes TEXT NOT NULL);
		INSERT INTO streams VALUES (1, 'A', 'Raw Events', 'UNLOCKED', 1, 1, 1, 'r', 1, 5, 9, '{"x":"5","d":"2024-02-01T00:00:00.000Z","s":"abc"}'),
			(2, 'B', '', 'DELETED', 2, 0, 3, '', 2, 0, 0, '{}');
		CREATE TABLE stream_receipts (receipt_id TEXT NOT NULL, stream_id INTEGER NOT NULL, PRIMARY KEY (receipt_id, stream_id));
		INSERT INTO stream_receipts VALUES ('p1', 1), ('p2', 2)`); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := ParseJSON(b)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || pe.Msg == "" {
				t.Fatalf("error %v (%T) is not a located *Error", err, err)
			}
			return
		}
		for _, d := range []Dialect{SQLite, Postgres} {
			where, args := e.Where(d, nil)
			placeholders(t, where, len(args))
			noValuesInSQL(t, where)
			if d == SQLite {
				var n int
				if err := db.QueryRowContext(ctx, "SELECT count(*) FROM streams WHERE "+where, args...).Scan(&n); err != nil {
					t.Fatalf("sqlite rejects %s %v: %v", where, args, err)
				}
			}
		}
	})
}
