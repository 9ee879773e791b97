package meta

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/weirhq/weir/internal/feed"
)

// ErrStale is wrapped by errors for a version-checked update of a feed or
// user that changed since the caller read it. It is distinct from
// ErrNotFound: the object exists, but not at the version named.
var ErrStale = errors.New("stale version")

// ErrInUse is wrapped by errors for deleting a feed that still has streams
// that are not deleted.
var ErrInUse = errors.New("in use")

// StaleError is a refused version-checked update. It matches ErrStale and
// carries the current version, so that a client can be told which version
// to read again.
type StaleError struct {
	What    string // e.g. `feed "X"`
	Want    int64  // the version the caller named
	Current int64  // the version stored
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("%s is at version %d, not %d: it changed since it was read", e.What, e.Current, e.Want)
}

// Is makes errors.Is(err, ErrStale) true.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// feedColumns are read in this order by scanFeed. version is not written by
// CreateFeed: a new feed is always version 1 (the column default).
const (
	feedInsertColumns = `name, status, stream_type, encoding, context_encoding, classification, description, create_ms, update_ms`
	feedColumns       = feedInsertColumns + `, version`
)

// ErrEarlierStreams is wrapped by CreateFreshFeed's error when streams
// already carry the feed name.
var ErrEarlierStreams = errors.New("streams of an earlier feed of that name exist")

// hasStreamsQuery tells whether any stream, of any status, carries a feed
// name (streams_feed_id answers it from the index).
const hasStreamsQuery = `SELECT EXISTS (SELECT 1 FROM streams WHERE feed = $1)`

// CreateFeed stores a new feed at version 1 (f.Version is ignored). It fails
// with an error wrapping ErrExists when the name is taken. Zero
// CreateMs/UpdateMs are set to now. Streams that already carry the name (of
// an earlier feed of that name, or received while there was none) become
// the new feed's: streams and feed permissions are keyed by name. Callers
// that must not hand those streams on use CreateFreshFeed.
func (r *Repo) CreateFeed(ctx context.Context, f feed.Feed) error {
	return r.createFeed(ctx, f, false)
}

// CreateFreshFeed is CreateFeed, refused with an error wrapping
// ErrEarlierStreams when any stream (of any status, DELETED included)
// already carries the name. Whoever creates a feed may be made its owner,
// and an owner reaches every stream of the name: a user allowed to create
// feeds must not gain the streams of a feed deleted earlier this way. A
// taken name is still ErrExists. The check and the insert are one
// transaction.
func (r *Repo) CreateFreshFeed(ctx context.Context, f feed.Feed) error {
	return r.createFeed(ctx, f, true)
}

// FeedNameHasStreams reports whether any stream, of any status, carries the
// feed name, whether or not a feed of that name exists.
func (r *Repo) FeedNameHasStreams(ctx context.Context, name string) (bool, error) {
	var has bool
	if err := r.db.QueryRowContext(ctx, hasStreamsQuery, name).Scan(&has); err != nil {
		return false, fmt.Errorf("streams of feed name %q: %w", name, err)
	}
	return has, nil
}

func (r *Repo) createFeed(ctx context.Context, f feed.Feed, fresh bool) error {
	if f.Name == "" {
		return errors.New("create feed: empty name")
	}
	now := nowMs()
	if f.CreateMs == 0 {
		f.CreateMs = now
	}
	if f.UpdateMs == 0 {
		f.UpdateMs = f.CreateMs
	}
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		if fresh {
			// A taken name is ErrExists whatever its streams, so that the
			// usual answer does not change.
			var taken, has bool
			if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM feeds WHERE name = $1)`, f.Name).Scan(&taken); err != nil {
				return fmt.Errorf("look for the feed: %w", err)
			}
			if taken {
				return ErrExists
			}
			if err := tx.QueryRowContext(ctx, hasStreamsQuery, f.Name).Scan(&has); err != nil {
				return fmt.Errorf("look for earlier streams: %w", err)
			}
			if has {
				return ErrEarlierStreams
			}
		}
		// ON CONFLICT DO NOTHING reports a taken name as zero rows affected on
		// both engines, instead of engine-specific constraint error codes.
		res, err := tx.ExecContext(ctx, `INSERT INTO feeds (`+feedInsertColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (name) DO NOTHING`,
			f.Name, string(f.Status), f.StreamType, f.Encoding, f.ContextEncoding,
			f.Classification, f.Description, f.CreateMs, f.UpdateMs)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrExists
		}
		return nil
	})
	r.feedGen.Add(1)
	if err != nil {
		return fmt.Errorf("create feed %q: %w", f.Name, err)
	}
	return nil
}

// GetFeed returns the feed with exactly this name, or an error wrapping
// ErrNotFound.
func (r *Repo) GetFeed(ctx context.Context, name string) (feed.Feed, error) {
	row := r.db.QueryRowContext(ctx, `SELECT `+feedColumns+` FROM feeds WHERE name = $1`, name)
	f, err := scanFeed(row)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return feed.Feed{}, fmt.Errorf("get feed %q: %w", name, err)
	}
	return f, nil
}

// ListFeeds returns all feeds ordered by name (byte-wise on both engines).
func (r *Repo) ListFeeds(ctx context.Context) ([]feed.Feed, error) {
	fs, err := queryAll(ctx, r.db, scanFeed, `SELECT `+feedColumns+` FROM feeds ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list feeds: %w", err)
	}
	return fs, nil
}

// UpdateFeed replaces every field of the named feed except Name and CreateMs,
// which identify it and record its history, whatever version it is at (the
// admin command's "last writer wins"). UpdateMs is set to now whatever the
// caller passed, and the version goes up by one, so that a client holding
// the old version learns of this change on its next version-checked update.
// A missing feed gives an error wrapping ErrNotFound.
func (r *Repo) UpdateFeed(ctx context.Context, f feed.Feed) error {
	if _, err := r.updateFeed(ctx, f, 0); err != nil {
		return fmt.Errorf("update feed %q: %w", f.Name, err)
	}
	return nil
}

// UpdateFeedVersion is UpdateFeed only if the feed is still at version
// (optimistic locking): the check and the write are one statement, so two
// clients that read the same version cannot both succeed. It returns the
// feed as stored, at its new version. A missing feed wraps ErrNotFound; a
// feed at another version gives a *StaleError (wrapping ErrStale) holding
// the current version. version must be positive.
func (r *Repo) UpdateFeedVersion(ctx context.Context, f feed.Feed, version int64) (feed.Feed, error) {
	if version <= 0 {
		return feed.Feed{}, fmt.Errorf("update feed %q: version %d is not positive", f.Name, version)
	}
	got, err := r.updateFeed(ctx, f, version)
	if err != nil {
		return feed.Feed{}, fmt.Errorf("update feed %q: %w", f.Name, err)
	}
	return got, nil
}

// updateFeed writes f; version 0 means whatever the stored version is.
func (r *Repo) updateFeed(ctx context.Context, f feed.Feed, version int64) (feed.Feed, error) {
	var got feed.Feed
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		got, err = scanFeed(tx.QueryRowContext(ctx, `UPDATE feeds SET
			status = $1, stream_type = $2, encoding = $3, context_encoding = $4,
			classification = $5, description = $6, update_ms = $7, version = version + 1
			WHERE name = $8 AND (CAST($9 AS BIGINT) = 0 OR version = CAST($9 AS BIGINT))
			RETURNING `+feedColumns,
			string(f.Status), f.StreamType, f.Encoding, f.ContextEncoding,
			f.Classification, f.Description, nowMs(), f.Name, version))
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		// Nothing changed: the feed is missing, or at another version. Read
		// in the same transaction, so the answer is about the same state.
		var current int64
		err = tx.QueryRowContext(ctx, `SELECT version FROM feeds WHERE name = $1`, f.Name).Scan(&current)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		return &StaleError{What: fmt.Sprintf("feed %q", f.Name), Want: version, Current: current}
	})
	r.feedGen.Add(1)
	return got, err
}

// DeleteFeed removes the named feed and every permission held on it (so that
// a feed created later under the same name does not inherit who could use
// this one). Its streams are never touched: they are data, deleted or kept
// by stream operations. Unless force is set, a feed that still has streams
// that are not DELETED (complete or being written) is refused with an error
// wrapping ErrInUse. It returns how many such streams the feed had. A missing
// feed wraps ErrNotFound.
func (r *Repo) DeleteFeed(ctx context.Context, name string, force bool) (live int64, err error) {
	err = r.withTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM streams WHERE feed = $1 AND status <> $2`,
			name, string(Deleted)).Scan(&live); err != nil {
			return fmt.Errorf("count streams: %w", err)
		}
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM feeds WHERE name = $1`, name).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if live > 0 && !force {
			return fmt.Errorf("%d streams are not deleted: %w", live, ErrInUse)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM feed_permissions WHERE feed = $1`, name); err != nil {
			return fmt.Errorf("delete permissions: %w", err)
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM feeds WHERE name = $1`, name)
		return err
	})
	r.feedGen.Add(1)
	if err != nil {
		return live, fmt.Errorf("delete feed %q: %w", name, err)
	}
	return live, nil
}

// rowScanner is satisfied by *sql.Row and *sql.Rows.
type rowScanner interface {
	Scan(dest ...any) error
}

func scanFeed(s rowScanner) (feed.Feed, error) {
	var (
		f      feed.Feed
		status string
	)
	err := s.Scan(&f.Name, &status, &f.StreamType, &f.Encoding, &f.ContextEncoding,
		&f.Classification, &f.Description, &f.CreateMs, &f.UpdateMs, &f.Version)
	f.Status = feed.Status(status)
	return f, err
}
