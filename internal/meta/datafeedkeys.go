package meta

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/weirhq/weir/internal/attr"
)

// DataFeedKey is a sender credential created with the admin command. Only the
// hash of the key is stored; Hint is a few leading characters of its random
// part so an operator can tell keys apart in a listing (it cannot
// authenticate). A key authenticates senders that name Account in the owner
// header, or that name no owner (it is then found by Lookup), and its
// Attributes are applied to every stream it sends.
type DataFeedKey struct {
	ID        int64
	Account   string
	Hint      string
	Hash      string
	Salt      string // "" for algorithms that embed the salt in Hash (bcrypt)
	Algorithm string // ARGON2 or BCRYPT_2A
	// Lookup finds the key without its owner: the hex SHA-256 of the key
	// ("" for keys created before weir stored it).
	Lookup    string
	ExpiresMs int64
	CreateMs  int64
	RevokedMs int64 // 0 while the key is usable
	// Attributes are never nil on keys read back from the repository.
	Attributes *attr.Map
}

const dataFeedKeyColumns = `id, account, hint, hash, salt, algorithm, lookup, expires_ms, attributes, create_ms, revoked_ms`

// CreateDataFeedKey stores a new key and sets k.ID (and k.CreateMs when it
// was 0) once the row is committed.
func (r *Repo) CreateDataFeedKey(ctx context.Context, k *DataFeedKey) error {
	switch {
	case strings.TrimSpace(k.Account) == "":
		return errors.New("create data feed key: empty account")
	case k.Hash == "":
		return fmt.Errorf("create data feed key for account %q: empty hash", k.Account)
	case k.Algorithm == "":
		return fmt.Errorf("create data feed key for account %q: empty algorithm", k.Account)
	case k.ExpiresMs <= 0:
		// Every key expires: a key that lives forever would outlast the
		// sender it was issued to.
		return fmt.Errorf("create data feed key for account %q: no expiry", k.Account)
	}
	attrs, err := attrsJSON(k.Attributes)
	if err != nil {
		return fmt.Errorf("create data feed key for account %q: %w", k.Account, err)
	}
	createMs := k.CreateMs
	if createMs == 0 {
		createMs = nowMs()
	}
	var id int64
	err = r.withTx(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `INSERT INTO datafeed_keys
			(account, hint, hash, salt, algorithm, lookup, expires_ms, attributes, create_ms, revoked_ms)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
			RETURNING id`,
			k.Account, k.Hint, k.Hash, k.Salt, k.Algorithm, k.Lookup, k.ExpiresMs, attrs, createMs, k.RevokedMs,
		).Scan(&id)
	})
	if err != nil {
		return fmt.Errorf("create data feed key for account %q: %w", k.Account, err)
	}
	k.ID, k.CreateMs = id, createMs
	return nil
}

// ListDataFeedKeys returns the keys of account ("" = every account),
// revoked ones included, ordered by id.
func (r *Repo) ListDataFeedKeys(ctx context.Context, account string) ([]DataFeedKey, error) {
	q := `SELECT ` + dataFeedKeyColumns + ` FROM datafeed_keys`
	var args []any
	if account != "" {
		q += ` WHERE account = $1`
		args = append(args, account)
	}
	ks, err := r.queryDataFeedKeys(ctx, q+` ORDER BY id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list data feed keys: %w", err)
	}
	return ks, nil
}

// DataFeedKeysForAccount returns the keys of exactly this account that have
// not been revoked, ordered by id: the candidates a presented key is checked
// against. Expired keys are included so that the caller can tell an expired
// key (314) from an unknown one (313). The account matches exactly, as the
// reference system compares the owner header with a key's owner.
func (r *Repo) DataFeedKeysForAccount(ctx context.Context, account string) ([]DataFeedKey, error) {
	ks, err := r.queryDataFeedKeys(ctx, `SELECT `+dataFeedKeyColumns+` FROM datafeed_keys
		WHERE account = $1 AND revoked_ms = 0 ORDER BY id`, account)
	if err != nil {
		return nil, fmt.Errorf("data feed keys of account %q: %w", account, err)
	}
	return ks, nil
}

// dataFeedKeysByLookupSQL repeats the partial index's condition
// (lookup <> ”) so that the planner can use it: neither engine proves it
// from lookup = $1.
const dataFeedKeysByLookupSQL = `SELECT ` + dataFeedKeyColumns + ` FROM datafeed_keys
	WHERE lookup = $1 AND lookup <> '' AND revoked_ms = 0 ORDER BY id`

// DataFeedKeysByLookup returns the keys, not revoked, whose Lookup is
// lookup (a non-empty one), ordered by id: the candidates for a key
// presented without its owner.
func (r *Repo) DataFeedKeysByLookup(ctx context.Context, lookup string) ([]DataFeedKey, error) {
	if lookup == "" {
		return nil, nil
	}
	ks, err := r.queryDataFeedKeys(ctx, dataFeedKeysByLookupSQL, lookup)
	if err != nil {
		return nil, fmt.Errorf("data feed keys by lookup: %w", err)
	}
	return ks, nil
}

// GetDataFeedKey returns the key with this id, revoked or not, or an error
// wrapping ErrNotFound.
func (r *Repo) GetDataFeedKey(ctx context.Context, id int64) (DataFeedKey, error) {
	row := r.db.QueryRowContext(ctx, `SELECT `+dataFeedKeyColumns+` FROM datafeed_keys WHERE id = $1`, id)
	k, err := scanDataFeedKey(row)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return DataFeedKey{}, fmt.Errorf("get data feed key %d: %w", id, err)
	}
	return k, nil
}

// RevokeDataFeedKey marks the key revoked now, so it stops authenticating.
// Revoking a key that is already revoked succeeds and keeps the first
// revocation time; a missing key gives an error wrapping ErrNotFound. Rows
// are kept, not deleted, so a listing still shows which keys existed.
func (r *Repo) RevokeDataFeedKey(ctx context.Context, id int64) error {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE datafeed_keys SET revoked_ms = $1 WHERE id = $2 AND revoked_ms = 0`,
			nowMs(), id)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		// Nothing changed: either already revoked (fine) or missing.
		var one int
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM datafeed_keys WHERE id = $1`, id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("revoke data feed key %d: %w", id, err)
	}
	return nil
}

func (r *Repo) queryDataFeedKeys(ctx context.Context, q string, args ...any) ([]DataFeedKey, error) {
	return queryAll(ctx, r.db, scanDataFeedKey, q, args...)
}

func scanDataFeedKey(s rowScanner) (DataFeedKey, error) {
	var (
		k     DataFeedKey
		attrs string
	)
	if err := s.Scan(&k.ID, &k.Account, &k.Hint, &k.Hash, &k.Salt, &k.Algorithm, &k.Lookup, &k.ExpiresMs,
		&attrs, &k.CreateMs, &k.RevokedMs); err != nil {
		return DataFeedKey{}, err
	}
	k.Attributes = new(attr.Map)
	if err := k.Attributes.UnmarshalJSON([]byte(attrs)); err != nil {
		return DataFeedKey{}, fmt.Errorf("data feed key %d: %w", k.ID, err)
	}
	return k, nil
}
