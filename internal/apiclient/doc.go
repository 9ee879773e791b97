// Package apiclient is a Go client of weir's REST API, generated from the
// OpenAPI document the running service serves (its 3.0 form, which the
// generator reads). It exists to prove that the document is usable by a
// generator and accurate; client_test.go calls a real server with it and
// checks that the committed client is what the served document generates.
//
// Regenerate after any change to the API (the golden test in internal/api
// tells when):
//
//	go test ./internal/api -run TestOpenAPIGolden -update && go generate ./internal/apiclient
//
// Use NewClientWithResponses with the API's base URL (<service>/<basePath>/api)
// for the API, and with the service root (<service>/<basePath>) for the
// datafeed, which lives beside /api.
package apiclient

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../api/testdata/openapi-3.0.golden.json
