package handlers

import (
	_ "embed"
	"net/http"
)

// openAPIDoc describes the API. A test checks it against the route table so they cannot drift.
//
//go:embed openapi.json
var openAPIDoc []byte

// OpenAPIDocument returns the OpenAPI document.
func OpenAPIDocument() []byte { return openAPIDoc }

// OpenAPI is GET /api/gpulab/openapi.json.
func (h *Handlers) OpenAPI(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDoc)
	return nil
}
