package store

// SetCompactHook makes a compaction call fn after each of its steps
// ("claimed", "copied", "committed", "removed"); an error from fn stops
// it there, as a crash would.
func SetCompactHook(s *Store, fn func(step string) error) { s.compactHook = fn }
