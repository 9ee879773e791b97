package streamquery

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"

	"github.com/weirhq/weir/internal/attr"

	_ "modernc.org/sqlite" // registers "sqlite" for running compiled conditions
)

// FuzzParseJSON: any input either fails with a located *Error or parses to
// an expression that compiles, on both dialects, to SQL whose placeholders
// match its arguments exactly, that holds no value text, and that SQLite
// accepts and runs against a streams table. Read by ParseAttributesJSON,
// it also selects on SQLite exactly the streams whose attributes Match.
func FuzzParseJSON(f *testing.F) {
	seeds := []string{
		`null`, `{}`, `[]`, `{"type":"operator"}`,
		op("AND", term_("Feed", "EQUALS", "A*"), term_("Id", "IN", "1,2,3")),
		op("OR", term_("attribute:x", "BETWEEN", "1,9"), term_("attribute:d", "GREATER_THAN", "2024-01-01T00:00:00.000Z")),
		op("NOT", term_("attribute:s", "ENDS_WITH", "'; DROP TABLE streams; --"), term_("Receipt Id", "STARTS_WITH", "$1")),
		term_("Create Time", "BETWEEN", "0,1"), term_("Status", "IN", "unlocked,Locked"),
		term_("attribute:ü", "CONTAINS", "ß"), term_("Type", "IS_NOT_NULL", ""),
		op("OR", term_("Feed", "EQUALS", "*?[1]"), term_("s", "NOT_EQUALS", "a*c"), term_("N", "LESS_THAN", "-3")),
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
			(2, 'B', '', 'DELETED', 2, 0, 3, '', 2, 0, 0, '{}'),
			(3, 'C', '', 'UNLOCKED', 3, 0, 3, '', 1, 0, 0, '{"Feed":"F-?[1]%_","n":"-12","S":"","ü":"ß*"}');
		CREATE TABLE stream_receipts (receipt_id TEXT NOT NULL, stream_id INTEGER NOT NULL, PRIMARY KEY (receipt_id, stream_id));
		INSERT INTO stream_receipts VALUES ('p1', 1), ('p2', 2)`); err != nil {
		f.Fatal(err)
	}
	// The streams' attributes for Match, looked up as the SQL does: names
	// through SQLite's lower(), which folds ASCII letters only.
	var rows []*attr.Map
	for id := 1; id <= 3; id++ {
		var js string
		if err := db.QueryRowContext(ctx, "SELECT attributes FROM streams WHERE id = $1", id).Scan(&js); err != nil {
			f.Fatal(err)
		}
		m := new(attr.Map)
		if err := m.UnmarshalJSON([]byte(js)); err != nil {
			f.Fatal(err)
		}
		rows = append(rows, m)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if e, err := ParseAttributesJSON(b); err == nil {
			where, args := e.Where(SQLite, nil)
			var got []int
			rs, err := db.QueryContext(ctx, "SELECT id FROM streams WHERE "+where+" ORDER BY id", args...)
			if err != nil {
				t.Fatalf("sqlite rejects %s %v: %v", where, args, err)
			}
			for rs.Next() {
				var id int
				if err := rs.Scan(&id); err != nil {
					t.Fatal(err)
				}
				got = append(got, id)
			}
			if err := rs.Close(); err != nil {
				t.Fatal(err)
			}
			var want []int
			for i, m := range rows {
				match := e.Match(func(name string) (string, bool) {
					for k, v := range m.All() {
						if attr.FoldName(k) == attr.FoldName(name) {
							return v, true
						}
					}
					return "", false
				})
				if match {
					want = append(want, i+1)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s: SQL selects %v, Match %v (%s %v)", b, got, want, where, args)
			}
		}
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
