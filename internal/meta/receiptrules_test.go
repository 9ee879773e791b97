package meta

import (
	"errors"
	"sync"
	"testing"
)

// testReceiptRules: the rule set starts empty at version 0, each change
// goes up by one, a stale version is refused with the current one, and of
// writers racing from the same version (two processes) exactly one wins.
func testReceiptRules(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	got, err := r.GetReceiptRules(ctx)
	if err != nil || got.Rules != "[]" || got.Version != 0 {
		t.Fatalf("before any change: %+v, %v", got, err)
	}
	if v, err := r.ReceiptRulesVersion(ctx); err != nil || v != 0 {
		t.Fatalf("version before any change: %d, %v", v, err)
	}
	// Version 1 is not what a client that read version 0 may name.
	var stale *StaleError
	if _, err := r.PutReceiptRules(ctx, `[{"action":"RECEIVE"}]`, 1, "alice"); !errors.As(err, &stale) || stale.Current != 0 {
		t.Fatalf("put at version 1 of an empty set: %v", err)
	}
	// From nothing (the insert path): of writers racing, one wins.
	other := openRepo(t, loc) // a second process
	race(t, r, other, 0, 1)
	first, err := r.PutReceiptRules(ctx, `[{"action":"RECEIVE"}]`, 1, "alice")
	if err != nil || first.Version != 2 || first.UpdateUser != "alice" || first.UpdateMs == 0 {
		t.Fatalf("put at version 1: %+v, %v", first, err)
	}
	if got, err := r.GetReceiptRules(ctx); err != nil || got != first {
		t.Fatalf("stored %+v (%v), returned %+v", got, err, first)
	}
	if _, err := r.PutReceiptRules(ctx, `[]`, 0, "bob"); !errors.As(err, &stale) || stale.Current != 2 || !errors.Is(err, ErrStale) {
		t.Fatalf("put at version 0 of a set at 2: %v", err)
	}
	second, err := r.PutReceiptRules(ctx, `[{"action":"DROP"}]`, AnyVersion, "admin")
	if err != nil || second.Version != 3 || second.Rules != `[{"action":"DROP"}]` {
		t.Fatalf("put at any version: %+v, %v", second, err)
	}
	race(t, r, other, 3, 1)
	// Writers at any version all win, one after another.
	race(t, r, other, AnyVersion, 8)
	if v, err := r.ReceiptRulesVersion(ctx); err != nil || v != 12 {
		t.Fatalf("version after the races: %d, %v; want 12", v, err)
	}
}

// race has writers, half on each repository, replace the rules at
// version; want of them must succeed and the rest be refused as stale.
func race(t *testing.T, r, other *Repo, version int64, want int) {
	t.Helper()
	won, stale := versionRace(t, r, other, func(repo *Repo) error {
		_, err := repo.PutReceiptRules(t.Context(), `[]`, version, "racer")
		return err
	})
	if won != want || stale != raceWriters-want {
		t.Fatalf("race at version %d: %d won, %d stale; want %d winners", version, won, stale, want)
	}
}

// raceWriters is how many writers versionRace starts.
const raceWriters = 8

// versionRace runs raceWriters version-checked writes at once, half on each
// repository (two processes), and counts those that succeeded and those
// refused as stale; any other error fails the test.
func versionRace(t *testing.T, r, other *Repo, write func(*Repo) error) (won, stale int) {
	t.Helper()
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		unexpected error
	)
	for i := range raceWriters {
		repo := r
		if i%2 == 1 {
			repo = other
		}
		wg.Go(func() {
			err := write(repo)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, ErrStale):
				stale++
			default:
				unexpected = err
			}
		})
	}
	wg.Wait()
	if unexpected != nil {
		t.Fatal(unexpected)
	}
	return won, stale
}
