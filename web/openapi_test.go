package web_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/web"
)

// The OpenAPI document and the route table must describe the same API.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(handlers.OpenAPIDocument(), &doc); err != nil {
		t.Fatalf("OpenAPI document is not JSON: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	routes := web.APIRoutes(nil)
	documented := 0
	for path, ops := range doc.Paths {
		documented += len(ops)
		_ = path
	}
	for _, r := range routes {
		p := "/api/gpulab/{version}/" + r.Path
		ops, ok := doc.Paths[p]
		if !ok {
			t.Errorf("route %s %s is not in the OpenAPI document", r.Method, p)
			continue
		}
		if _, ok := ops[strings.ToLower(r.Method)]; !ok {
			t.Errorf("route %s %s: method not in the OpenAPI document", r.Method, p)
		}
	}
	if documented != len(routes) {
		t.Errorf("OpenAPI documents %d operations, the route table has %d", documented, len(routes))
	}
}
