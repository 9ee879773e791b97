package store

// SetCompactHook makes a compaction call fn after each of its steps
// ("claimed", "copied", "committed", "removed"); an error from fn stops
// it there, as a crash would.
func SetCompactHook(s *Store, fn func(step string) error) { s.compactHook = fn }

// SetPackSeq sets the sequence number the next pack's name follows (as a
// start after the clock went back would).
func SetPackSeq(s *Store, n int64) { s.packSeq.Store(n) }
