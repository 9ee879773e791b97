package meta

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
)

// ErrCycle is wrapped by errors for a group membership that would make a
// group (indirectly) a member of itself. Effective permissions are resolved
// by walking up the membership graph, and a cycle would make every group on
// it share every other's permissions, which nobody intends.
var ErrCycle = errors.New("membership would make a group a member of itself")

// User is a user or a group: both live in the users table so that a group
// can be a member of another group and hold permissions like a user.
type User struct {
	ID          int64
	Name        string // unique and exact (byte-wise); for OIDC users the subject's name
	DisplayName string
	Group       bool
	Enabled     bool
	CreateMs    int64
	UpdateMs    int64
}

// APIKey is the stored form of an API key: never the key itself, only the
// SHA-256 of it (Hash) and its visible prefix.
type APIKey struct {
	ID         int64
	Prefix     string // sak_<10 hex>_: shown to users to tell keys apart; cannot authenticate
	Hash       string `json:"-"` // hex SHA-256 of the whole key; looked up, never shown
	OwnerID    int64
	Owner      string // the owner's user name (read from users, ignored on create)
	Name       string // unique per owner
	Comments   string
	ExpiresMs  int64
	LastUsedMs int64 // 0 = never used
	CreateMs   int64
	Enabled    bool
}

const userColumns = `id, name, display_name, is_group, enabled, create_ms, update_ms`

// userColumnsU is userColumns qualified by the alias u, for joins.
const userColumnsU = `u.id, u.name, u.display_name, u.is_group, u.enabled, u.create_ms, u.update_ms`

// apiKeySelect reads api keys with their owner's name; the caller appends
// WHERE/ORDER BY clauses on k (api_keys) and u (users).
const apiKeySelect = `SELECT k.id, k.prefix, k.hash, k.owner_id, u.name, k.name, k.comments,
	k.expires_ms, k.last_used_ms, k.create_ms, k.enabled
	FROM api_keys k JOIN users u ON u.id = k.owner_id`

// ancestorsCTE defines anc(id): the user $1 and every group it belongs to,
// directly or through other groups. Only enabled groups are walked, so that
// disabling a group withdraws what it grants to its members and to its own
// member groups. UNION (not UNION ALL) ends the recursion even if a cycle
// were ever present. The CAST types $1 for PostgreSQL, which cannot infer a
// parameter's type from a bare SELECT.
const ancestorsCTE = `WITH RECURSIVE anc(id) AS (
		SELECT CAST($1 AS BIGINT)
		UNION
		SELECT gm.group_id FROM group_members gm
			JOIN anc ON gm.member_id = anc.id
			JOIN users g ON g.id = gm.group_id
			WHERE g.enabled = 1
	)`

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func scanUser(s rowScanner) (User, error) {
	var (
		u              User
		group, enabled int
	)
	err := s.Scan(&u.ID, &u.Name, &u.DisplayName, &group, &enabled, &u.CreateMs, &u.UpdateMs)
	u.Group, u.Enabled = group != 0, enabled != 0
	return u, err
}

func scanAPIKey(s rowScanner) (APIKey, error) {
	var (
		k       APIKey
		enabled int
	)
	err := s.Scan(&k.ID, &k.Prefix, &k.Hash, &k.OwnerID, &k.Owner, &k.Name, &k.Comments,
		&k.ExpiresMs, &k.LastUsedMs, &k.CreateMs, &enabled)
	k.Enabled = enabled != 0
	return k, err
}

// lockAccess serialises, across processes, the access changes whose check
// and write must not interleave: a membership's cycle check, and the
// bootstrap's "no users yet" check.
//
// SQLite needs nothing more: write transactions begin IMMEDIATE and so
// already hold the database's single write lock.
//
// PostgreSQL takes a transaction-scoped advisory lock in weir's namespace
// (see lockMigrations), keyed by the schema so that separate weir schemas in
// one database do not wait for each other.
func (r *Repo) lockAccess(ctx context.Context, tx *sql.Tx) error {
	if r.engine != enginePostgres {
		return nil
	}
	if _, err := tx.ExecContext(ctx,
		`SELECT pg_advisory_xact_lock(2003134834, hashtext(coalesce(current_schema(), '') || '/access'))`); err != nil {
		return fmt.Errorf("take access lock: %w", err)
	}
	return nil
}

// insertUser inserts u and returns its id, or ErrExists if the name is taken.
func insertUser(ctx context.Context, tx *sql.Tx, u User) (int64, error) {
	// ON CONFLICT DO NOTHING with RETURNING yields no row for a taken name
	// on both engines, instead of engine-specific constraint error codes.
	var id int64
	err := tx.QueryRowContext(ctx, `INSERT INTO users (name, display_name, is_group, enabled, create_ms, update_ms)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (name) DO NOTHING
		RETURNING id`,
		u.Name, u.DisplayName, boolInt(u.Group), boolInt(u.Enabled), u.CreateMs, u.UpdateMs).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrExists
	}
	return id, err
}

// CreateUser stores a new user or group and returns it with its ID. Zero
// CreateMs/UpdateMs are set to now. A taken name gives an error wrapping
// ErrExists.
func (r *Repo) CreateUser(ctx context.Context, u User) (User, error) {
	if u.Name == "" {
		return User{}, errors.New("create user: empty name")
	}
	if u.CreateMs == 0 {
		u.CreateMs = nowMs()
	}
	if u.UpdateMs == 0 {
		u.UpdateMs = u.CreateMs
	}
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		u.ID, err = insertUser(ctx, tx, u)
		return err
	})
	if err != nil {
		return User{}, fmt.Errorf("create user %q: %w", u.Name, err)
	}
	return u, nil
}

// GetUser returns the user or group with exactly this name, or an error
// wrapping ErrNotFound.
func (r *Repo) GetUser(ctx context.Context, name string) (User, error) {
	u, err := scanUser(r.db.QueryRowContext(ctx, `SELECT `+userColumns+` FROM users WHERE name = $1`, name))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return User{}, fmt.Errorf("get user %q: %w", name, err)
	}
	return u, nil
}

// GetUserByID returns the user or group with this id, or an error wrapping
// ErrNotFound.
func (r *Repo) GetUserByID(ctx context.Context, id int64) (User, error) {
	u, err := scanUser(r.db.QueryRowContext(ctx, `SELECT `+userColumns+` FROM users WHERE id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return User{}, fmt.Errorf("get user %d: %w", id, err)
	}
	return u, nil
}

// ListUsers returns every user and group ordered by name (byte-wise on both
// engines).
func (r *Repo) ListUsers(ctx context.Context) ([]User, error) {
	return r.queryUsers(ctx, "list users", `SELECT `+userColumns+` FROM users ORDER BY name`)
}

func (r *Repo) queryUsers(ctx context.Context, what, query string, args ...any) ([]User, error) {
	us, err := queryAll(ctx, r.db, scanUser, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return us, nil
}

// HasUsers reports whether any user or group exists.
func (r *Repo) HasUsers(ctx context.Context) (bool, error) {
	return r.anyRow(ctx, "users")
}

// SetUserEnabled enables or disables a user or group. A missing name gives
// an error wrapping ErrNotFound.
func (r *Repo) SetUserEnabled(ctx context.Context, name string, enabled bool) error {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		return expectOne(tx.ExecContext(ctx, `UPDATE users SET enabled = $1, update_ms = $2, version = version + 1 WHERE name = $3`,
			boolInt(enabled), nowMs(), name))
	})
	if err != nil {
		return fmt.Errorf("set user %q enabled=%t: %w", name, enabled, err)
	}
	return nil
}

// expectOne turns "no row changed" into ErrNotFound.
func expectOne(res sql.Result, err error) error { return expectChange(res, err, ErrNotFound) }

// expectChange turns "no row changed" into none, the caller's error for it.
func expectChange(res sql.Result, err, none error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return none
	}
	return nil
}

// userID resolves a name inside a transaction, wrapping ErrNotFound with the
// name so the caller's message says which of several names was missing.
func userID(ctx context.Context, tx *sql.Tx, name string) (int64, error) {
	var id int64
	err := tx.QueryRowContext(ctx, `SELECT id FROM users WHERE name = $1`, name).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("user or group %q: %w", name, ErrNotFound)
	}
	return id, err
}

// AddMember makes member (a user or a group) a member of group. It does not
// check that group is a group (the caller does; the flag never changes). It
// is idempotent. A missing name wraps ErrNotFound; a membership that would
// close a cycle (including group == member) wraps ErrCycle.
func (r *Repo) AddMember(ctx context.Context, group, member string) error {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		// The cycle check reads the membership graph and the insert changes
		// it: without the lock, two concurrent additions (A into B, B into A)
		// could each pass the check on PostgreSQL and together form a cycle.
		if err := r.lockAccess(ctx, tx); err != nil {
			return err
		}
		gid, err := userID(ctx, tx, group)
		if err != nil {
			return err
		}
		mid, err := userID(ctx, tx, member)
		if err != nil {
			return err
		}
		// A cycle forms exactly when member is already group itself or one
		// of group's ancestors (walked whatever their enabled flag: the
		// structure must stay acyclic even if a group is re-enabled later).
		var n int
		if err := tx.QueryRowContext(ctx, `WITH RECURSIVE anc(id) AS (
				SELECT CAST($1 AS BIGINT)
				UNION
				SELECT gm.group_id FROM group_members gm JOIN anc ON gm.member_id = anc.id
			)
			SELECT COUNT(*) FROM anc WHERE id = $2`, gid, mid).Scan(&n); err != nil {
			return fmt.Errorf("check for a cycle: %w", err)
		}
		if n > 0 {
			return ErrCycle
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO group_members (group_id, member_id) VALUES ($1, $2)
			ON CONFLICT (group_id, member_id) DO NOTHING`, gid, mid); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("add %q to group %q: %w", member, group, err)
	}
	return nil
}

// RemoveMember removes member from group. Removing a membership that does
// not exist is not an error; a missing name wraps ErrNotFound.
func (r *Repo) RemoveMember(ctx context.Context, group, member string) error {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		gid, err := userID(ctx, tx, group)
		if err != nil {
			return err
		}
		mid, err := userID(ctx, tx, member)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM group_members WHERE group_id = $1 AND member_id = $2`, gid, mid)
		return err
	})
	if err != nil {
		return fmt.Errorf("remove %q from group %q: %w", member, group, err)
	}
	return nil
}

// Members returns the direct members of a group, ordered by name.
func (r *Repo) Members(ctx context.Context, group string) ([]User, error) {
	return r.queryUsers(ctx, fmt.Sprintf("list members of %q", group), `SELECT `+userColumnsU+`
		FROM users u JOIN group_members gm ON gm.member_id = u.id
		JOIN users g ON g.id = gm.group_id
		WHERE g.name = $1 ORDER BY u.name`, group)
}

// Ancestors returns every enabled group the user or group with this id
// belongs to, directly or through other groups: the groups whose
// permissions it holds. Ordered by name.
func (r *Repo) Ancestors(ctx context.Context, id int64) ([]User, error) {
	return r.queryUsers(ctx, fmt.Sprintf("list groups of user %d", id), ancestorsCTE+`
		SELECT `+userColumnsU+` FROM users u
		WHERE u.id IN (SELECT id FROM anc) AND u.id <> $1 ORDER BY u.name`, id)
}

// GrantApp gives a user or group an application permission. It does not
// validate the permission name (the access package does). Granting one
// already held is not an error; a missing name wraps ErrNotFound.
func (r *Repo) GrantApp(ctx context.Context, name, permission string) error {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		id, err := userID(ctx, tx, name)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO app_permissions (user_id, permission) VALUES ($1, $2)
			ON CONFLICT (user_id, permission) DO NOTHING`, id, permission)
		return err
	})
	if err != nil {
		return fmt.Errorf("grant %q to %q: %w", permission, name, err)
	}
	return nil
}

// RevokeApp takes an application permission held directly by a user or
// group away (one held through a group stays). Revoking one not held is not
// an error; a missing name wraps ErrNotFound.
func (r *Repo) RevokeApp(ctx context.Context, name, permission string) error {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		id, err := userID(ctx, tx, name)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM app_permissions WHERE user_id = $1 AND permission = $2`, id, permission)
		return err
	})
	if err != nil {
		return fmt.Errorf("revoke %q from %q: %w", permission, name, err)
	}
	return nil
}

// SetFeedLevel sets the permission level a user or group holds directly on a
// feed; level 0 removes it. The row holds one level, which implies the lower
// ones, so setting replaces rather than adds. A missing name wraps
// ErrNotFound.
func (r *Repo) SetFeedLevel(ctx context.Context, name, feed string, level int) error {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		id, err := userID(ctx, tx, name)
		if err != nil {
			return err
		}
		if level <= 0 {
			_, err = tx.ExecContext(ctx, `DELETE FROM feed_permissions WHERE user_id = $1 AND feed = $2`, id, feed)
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO feed_permissions (user_id, feed, level) VALUES ($1, $2, $3)
			ON CONFLICT (user_id, feed) DO UPDATE SET level = excluded.level`, id, feed, level)
		return err
	})
	if err != nil {
		return fmt.Errorf("set level %d on feed %q for %q: %w", level, feed, name, err)
	}
	return nil
}

// Grants returns what a user or group holds directly (not through groups):
// application permissions sorted, and feed levels by feed name. A missing
// name wraps ErrNotFound.
func (r *Repo) Grants(ctx context.Context, name string) (app []string, feeds map[string]int, err error) {
	u, err := r.GetUser(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	app, feeds, err = r.permissions(ctx, `WITH anc(id) AS (SELECT CAST($1 AS BIGINT))`, u.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("grants of %q: %w", name, err)
	}
	return app, feeds, nil
}

// EffectivePermissions returns the union of what the user or group with
// this id holds and what every enabled group above it holds: application
// permissions (sorted, distinct) and, per feed, the highest level. It does
// not check that the user itself is enabled.
func (r *Repo) EffectivePermissions(ctx context.Context, id int64) (app []string, feeds map[string]int, err error) {
	app, feeds, err = r.permissions(ctx, ancestorsCTE, id)
	if err != nil {
		return nil, nil, fmt.Errorf("effective permissions of user %d: %w", id, err)
	}
	return app, feeds, nil
}

// permissions reads app and feed permissions of the ids in anc (defined by
// cte from $1) in one statement, so that both come from one snapshot.
func (r *Repo) permissions(ctx context.Context, cte string, id int64) ([]string, map[string]int, error) {
	rows, err := r.db.QueryContext(ctx, cte+`
		SELECT 'a', permission, 0 FROM app_permissions WHERE user_id IN (SELECT id FROM anc)
		UNION ALL
		SELECT 'f', feed, MAX(level) FROM feed_permissions WHERE user_id IN (SELECT id FROM anc) GROUP BY feed`, id)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	seen := map[string]bool{}
	app := []string{}
	feeds := map[string]int{}
	for rows.Next() {
		var (
			kind, name string
			level      int
		)
		if err := rows.Scan(&kind, &name, &level); err != nil {
			return nil, nil, err
		}
		if kind == "f" {
			feeds[name] = level
			continue
		}
		if !seen[name] {
			seen[name] = true
			app = append(app, name)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	sort.Strings(app)
	return app, feeds, nil
}

// insertAPIKey inserts k and returns its id, or ErrExists if the owner has a
// key of that name (or, never in practice, the hash is taken).
func insertAPIKey(ctx context.Context, tx *sql.Tx, k APIKey) (int64, error) {
	var id int64
	err := tx.QueryRowContext(ctx, `INSERT INTO api_keys
		(prefix, hash, owner_id, name, comments, expires_ms, enabled, last_used_ms, create_ms)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT DO NOTHING
		RETURNING id`,
		k.Prefix, k.Hash, k.OwnerID, k.Name, k.Comments, k.ExpiresMs, boolInt(k.Enabled), k.LastUsedMs, k.CreateMs).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrExists
	}
	return id, err
}

// CreateAPIKey stores a key for the user with k.OwnerID and returns it with
// its ID and Owner set. A zero CreateMs is set to now. A name the owner
// already uses wraps ErrExists; a missing owner wraps ErrNotFound.
func (r *Repo) CreateAPIKey(ctx context.Context, k APIKey) (APIKey, error) {
	if k.Hash == "" || k.Prefix == "" {
		return APIKey{}, errors.New("create api key: hash and prefix are required")
	}
	if k.CreateMs == 0 {
		k.CreateMs = nowMs()
	}
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT name FROM users WHERE id = $1`, k.OwnerID).Scan(&k.Owner); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("owner %d: %w", k.OwnerID, ErrNotFound)
			}
			return err
		}
		var err error
		k.ID, err = insertAPIKey(ctx, tx, k)
		return err
	})
	if err != nil {
		return APIKey{}, fmt.Errorf("create api key %q: %w", k.Name, err)
	}
	return k, nil
}

// GetAPIKey returns the key with this id, or an error wrapping ErrNotFound.
func (r *Repo) GetAPIKey(ctx context.Context, id int64) (APIKey, error) {
	k, err := scanAPIKey(r.db.QueryRowContext(ctx, apiKeySelect+` WHERE k.id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return APIKey{}, fmt.Errorf("get api key %d: %w", id, err)
	}
	return k, nil
}

// APIKeyByHash returns the key with this hash and its owner, or an error
// wrapping ErrNotFound. One statement, because it runs on every API request.
func (r *Repo) APIKeyByHash(ctx context.Context, hash string) (APIKey, User, error) {
	var (
		k                       APIKey
		u                       User
		kEnabled, grp, uEnabled int
	)
	err := r.db.QueryRowContext(ctx, `SELECT k.id, k.prefix, k.hash, k.owner_id, u.name, k.name, k.comments,
		k.expires_ms, k.last_used_ms, k.create_ms, k.enabled,
		u.display_name, u.is_group, u.enabled, u.create_ms, u.update_ms
		FROM api_keys k JOIN users u ON u.id = k.owner_id WHERE k.hash = $1`, hash).Scan(
		&k.ID, &k.Prefix, &k.Hash, &k.OwnerID, &k.Owner, &k.Name, &k.Comments,
		&k.ExpiresMs, &k.LastUsedMs, &k.CreateMs, &kEnabled,
		&u.DisplayName, &grp, &uEnabled, &u.CreateMs, &u.UpdateMs)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		// Not the hash: it is as good as the key for finding the row.
		return APIKey{}, User{}, fmt.Errorf("find api key by hash: %w", err)
	}
	k.Enabled = kEnabled != 0
	u.ID, u.Name, u.Group, u.Enabled = k.OwnerID, k.Owner, grp != 0, uEnabled != 0
	return k, u, nil
}

// ListAPIKeys returns the keys of the named owner, or of everyone when owner
// is "", ordered by id. An owner that does not exist wraps ErrNotFound.
func (r *Repo) ListAPIKeys(ctx context.Context, owner string) ([]APIKey, error) {
	q, args := apiKeySelect+` ORDER BY k.id`, []any(nil)
	if owner != "" {
		if _, err := r.GetUser(ctx, owner); err != nil {
			return nil, fmt.Errorf("list api keys: %w", err)
		}
		q, args = apiKeySelect+` WHERE u.name = $1 ORDER BY k.id`, []any{owner}
	}
	ks, err := queryAll(ctx, r.db, scanAPIKey, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return ks, nil
}

// SetAPIKeyEnabled enables or disables a key. A missing id wraps ErrNotFound.
func (r *Repo) SetAPIKeyEnabled(ctx context.Context, id int64, enabled bool) error {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		return expectOne(tx.ExecContext(ctx, `UPDATE api_keys SET enabled = $1 WHERE id = $2`, boolInt(enabled), id))
	})
	if err != nil {
		return fmt.Errorf("set api key %d enabled=%t: %w", id, enabled, err)
	}
	return nil
}

// DeleteAPIKey removes a key. A missing id wraps ErrNotFound.
func (r *Repo) DeleteAPIKey(ctx context.Context, id int64) error {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		return expectOne(tx.ExecContext(ctx, `DELETE FROM api_keys WHERE id = $1`, id))
	})
	if err != nil {
		return fmt.Errorf("delete api key %d: %w", id, err)
	}
	return nil
}

// TouchAPIKey records that the key was used at nowMs, unless it was already
// recorded as used within the last minIntervalMs (possibly by another node
// or a concurrent request): the condition makes the write happen at most
// once per interval whatever the callers. It reports whether it wrote.
func (r *Repo) TouchAPIKey(ctx context.Context, id, nowMs, minIntervalMs int64) (bool, error) {
	var n int64
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE api_keys SET last_used_ms = $1
			WHERE id = $2 AND last_used_ms <= $3`, nowMs, id, nowMs-minIntervalMs)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("record use of api key %d: %w", id, err)
	}
	return n > 0, nil
}

// BootstrapAdmin creates, in one transaction, user u holding permission and
// the API key k owned by it, but only if no user or group exists at all;
// otherwise it changes nothing and reports false. Checking and creating
// under the access lock makes concurrent first starts of several nodes
// create exactly one administrator. k.OwnerID is set from the new user.
func (r *Repo) BootstrapAdmin(ctx context.Context, u User, permission string, k APIKey) (bool, error) {
	now := nowMs()
	if u.CreateMs == 0 {
		u.CreateMs, u.UpdateMs = now, now
	}
	if k.CreateMs == 0 {
		k.CreateMs = now
	}
	created := false
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		if err := r.lockAccess(ctx, tx); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM users LIMIT 1) AS one`).Scan(&n); err != nil {
			return fmt.Errorf("count users: %w", err)
		}
		if n > 0 {
			return nil
		}
		id, err := insertUser(ctx, tx, u)
		if err != nil {
			return fmt.Errorf("create user %q: %w", u.Name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO app_permissions (user_id, permission) VALUES ($1, $2)`, id, permission); err != nil {
			return fmt.Errorf("grant %q: %w", permission, err)
		}
		k.OwnerID = id
		if _, err := insertAPIKey(ctx, tx, k); err != nil {
			return fmt.Errorf("create api key: %w", err)
		}
		created = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("bootstrap administrator: %w", err)
	}
	return created, nil
}
