package meta

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/weirhq/weir/internal/feed"
)

const feedColumns = `name, status, stream_type, encoding, context_encoding, classification, description, create_ms, update_ms`

// CreateFeed stores a new feed. It fails with an error wrapping ErrExists when
// the name is taken. Zero CreateMs/UpdateMs are set to now.
func (r *Repo) CreateFeed(ctx context.Context, f feed.Feed) error {
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
		// ON CONFLICT DO NOTHING reports a taken name as zero rows affected on
		// both engines, instead of engine-specific constraint error codes.
		res, err := tx.ExecContext(ctx, `INSERT INTO feeds (`+feedColumns+`)
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
	rows, err := r.db.QueryContext(ctx, `SELECT `+feedColumns+` FROM feeds ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list feeds: %w", err)
	}
	defer rows.Close()
	var fs []feed.Feed
	for rows.Next() {
		f, err := scanFeed(rows)
		if err != nil {
			return nil, fmt.Errorf("list feeds: %w", err)
		}
		fs = append(fs, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list feeds: %w", err)
	}
	return fs, nil
}

// UpdateFeed replaces every field of the named feed except Name and CreateMs,
// which identify it and record its history. UpdateMs is set to now whatever
// the caller passed. A missing feed gives an error wrapping ErrNotFound.
func (r *Repo) UpdateFeed(ctx context.Context, f feed.Feed) error {
	err := r.withTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE feeds SET
			status = $1, stream_type = $2, encoding = $3, context_encoding = $4,
			classification = $5, description = $6, update_ms = $7
			WHERE name = $8`,
			string(f.Status), f.StreamType, f.Encoding, f.ContextEncoding,
			f.Classification, f.Description, nowMs(), f.Name)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("update feed %q: %w", f.Name, err)
	}
	return nil
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
		&f.Classification, &f.Description, &f.CreateMs, &f.UpdateMs)
	f.Status = feed.Status(status)
	return f, err
}
