package meta

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ReceiptRules is the stored set of data receipt rules: the whole set as a
// JSON array, validated by the caller before it is stored (package
// receiptrule knows its shape; this package only keeps it).
type ReceiptRules struct {
	Rules      string // JSON array of rules; "[]" before the first change
	Version    int64  // 0 before the first change; up by one on every change
	UpdateMs   int64
	UpdateUser string
}

// AnyVersion makes PutReceiptRules replace the rules whatever their version
// (the admin command's "last writer wins").
const AnyVersion = -1

// GetReceiptRules returns the stored receipt rules: an empty set at
// version 0 if they were never set.
func (r *Repo) GetReceiptRules(ctx context.Context) (ReceiptRules, error) {
	rr := ReceiptRules{Rules: "[]"}
	err := r.db.QueryRowContext(ctx, `SELECT rules, version, update_ms, update_user FROM receipt_rules WHERE id = 1`).
		Scan(&rr.Rules, &rr.Version, &rr.UpdateMs, &rr.UpdateUser)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return ReceiptRules{}, fmt.Errorf("get receipt rules: %w", err)
	}
	return rr, nil
}

// ReceiptRulesVersion is the version of the stored receipt rules (0: never
// set): one small read, so that every node can ask often whether the rules
// changed.
func (r *Repo) ReceiptRulesVersion(ctx context.Context) (int64, error) {
	var v int64
	err := r.db.QueryRowContext(ctx, `SELECT version FROM receipt_rules WHERE id = 1`).Scan(&v)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("get receipt rules version: %w", err)
	}
	return v, nil
}

// PutReceiptRules replaces the receipt rules if they are still at version
// (0: never set; AnyVersion: whatever they are at), and returns them as
// stored, at their new version. Rules at another version give a
// *StaleError (wrapping ErrStale) with the current version. Each case is
// one statement, so two writers that read the same version cannot both
// succeed, on either engine.
func (r *Repo) PutReceiptRules(ctx context.Context, rules string, version int64, user string) (ReceiptRules, error) {
	out := ReceiptRules{Rules: rules, UpdateMs: nowMs(), UpdateUser: user}
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		var row *sql.Row
		switch version {
		case AnyVersion:
			row = tx.QueryRowContext(ctx, `INSERT INTO receipt_rules (id, rules, version, update_ms, update_user)
				VALUES (1, $1, 1, $2, $3)
				ON CONFLICT (id) DO UPDATE SET rules = excluded.rules, version = receipt_rules.version + 1,
					update_ms = excluded.update_ms, update_user = excluded.update_user
				RETURNING version`, out.Rules, out.UpdateMs, out.UpdateUser)
		case 0:
			row = tx.QueryRowContext(ctx, `INSERT INTO receipt_rules (id, rules, version, update_ms, update_user)
				VALUES (1, $1, 1, $2, $3) ON CONFLICT (id) DO NOTHING
				RETURNING version`, out.Rules, out.UpdateMs, out.UpdateUser)
		default:
			row = tx.QueryRowContext(ctx, `UPDATE receipt_rules SET rules = $1, version = version + 1,
				update_ms = $2, update_user = $3 WHERE id = 1 AND version = $4
				RETURNING version`, out.Rules, out.UpdateMs, out.UpdateUser, version)
		}
		err := row.Scan(&out.Version)
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		// Nothing written: the rules are at another version. Read it in the
		// same transaction, so the answer is about the same state.
		var current int64
		if err := tx.QueryRowContext(ctx, `SELECT version FROM receipt_rules WHERE id = 1`).Scan(&current); err != nil &&
			!errors.Is(err, sql.ErrNoRows) {
			return err
		}
		// Singular: messages read "<What> is at version N".
		return &StaleError{What: "the receipt rule set", Want: version, Current: current}
	})
	if err != nil {
		return ReceiptRules{}, fmt.Errorf("put receipt rules: %w", err)
	}
	return out, nil
}
