package api

// registerAdmin registers users, groups, permissions and data feed keys.
func (s *server) registerAdmin() {}
