package meta

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// VersionedUser is a user or group with its version: 1 when created, one
// more on every UpdateUserVersion. A full-object update names the version it
// read, so that a change made meanwhile is refused instead of overwritten.
// Memberships and grants are separate resources and do not change it.
type VersionedUser struct {
	User
	Version int64
}

const versionedUserColumns = userColumns + `, version`

func scanVersionedUser(s rowScanner) (VersionedUser, error) {
	var (
		u              VersionedUser
		group, enabled int
	)
	err := s.Scan(&u.ID, &u.Name, &u.DisplayName, &group, &enabled, &u.CreateMs, &u.UpdateMs, &u.Version)
	u.Group, u.Enabled = group != 0, enabled != 0
	return u, err
}

// GetVersionedUser returns the user or group with exactly this name and its
// version, or an error wrapping ErrNotFound.
func (r *Repo) GetVersionedUser(ctx context.Context, name string) (VersionedUser, error) {
	u, err := scanVersionedUser(r.db.QueryRowContext(ctx, `SELECT `+versionedUserColumns+` FROM users WHERE name = $1`, name))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return VersionedUser{}, fmt.Errorf("get user %q: %w", name, err)
	}
	return u, nil
}

// ListVersionedUsers returns every user and group with its version, ordered
// by name (byte-wise on both engines).
func (r *Repo) ListVersionedUsers(ctx context.Context) ([]VersionedUser, error) {
	us, err := queryAll(ctx, r.db, scanVersionedUser, `SELECT `+versionedUserColumns+` FROM users ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return us, nil
}

// UpdateUserVersion sets the display name and enabled flag of the named user
// or group, only if it is still at version (one statement checks and
// writes), and returns it at its new version. A missing name wraps
// ErrNotFound; another version gives a *StaleError (wrapping ErrStale) with
// the current version. It does not validate the display name (the caller
// does).
func (r *Repo) UpdateUserVersion(ctx context.Context, name, displayName string, enabled bool, version int64) (VersionedUser, error) {
	var u VersionedUser
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		u, err = scanVersionedUser(tx.QueryRowContext(ctx, `UPDATE users SET
			display_name = $1, enabled = $2, update_ms = $3, version = version + 1
			WHERE name = $4 AND version = $5
			RETURNING `+versionedUserColumns,
			displayName, boolInt(enabled), nowMs(), name, version))
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		// Nothing changed: missing, or at another version (read in the same
		// transaction, so the answer is about the same state).
		var current int64
		err = tx.QueryRowContext(ctx, `SELECT version FROM users WHERE name = $1`, name).Scan(&current)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		return &StaleError{What: fmt.Sprintf("user %q", name), Want: version, Current: current}
	})
	if err != nil {
		return VersionedUser{}, fmt.Errorf("update user %q: %w", name, err)
	}
	return u, nil
}

// DeleteUser removes a user or group. Its memberships (both ways), grants
// and API keys go with it (ON DELETE CASCADE), so its keys stop
// authenticating at once. A missing name wraps ErrNotFound.
func (r *Repo) DeleteUser(ctx context.Context, name string) error {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		return expectOne(tx.ExecContext(ctx, `DELETE FROM users WHERE name = $1`, name))
	})
	if err != nil {
		return fmt.Errorf("delete user %q: %w", name, err)
	}
	return nil
}

// DirectGroups returns, by member name, the names of the groups each user or
// group is directly a member of, sorted byte-wise; for one member when name
// is not "", else for everyone (one query, for listings). Members of no group
// are absent from the map.
func (r *Repo) DirectGroups(ctx context.Context, name string) (map[string][]string, error) {
	q := `SELECT m.name, g.name FROM group_members gm
		JOIN users m ON m.id = gm.member_id
		JOIN users g ON g.id = gm.group_id`
	var args []any
	if name != "" {
		q += ` WHERE m.name = $1`
		args = append(args, name)
	}
	rows, err := r.db.QueryContext(ctx, q+` ORDER BY m.name, g.name`, args...)
	if err != nil {
		return nil, fmt.Errorf("list group memberships: %w", err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var member, group string
		if err := rows.Scan(&member, &group); err != nil {
			return nil, fmt.Errorf("list group memberships: %w", err)
		}
		out[member] = append(out[member], group)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list group memberships: %w", err)
	}
	return out, nil
}
