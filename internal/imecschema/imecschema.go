// Package imecschema holds JSON Schemas of imec's GPULab models (imecilabt-gpulab-common 6.x),
// written by us from reading imec's pydantic models, so that tests can prove that the v4.0 API
// answers what imec's gpulab-cli accepts. imec's models forbid unknown fields; the schemas say
// so with additionalProperties false. Each schema file keeps its models under $defs; a model is
// named by file and definition, e.g. "job.json#/$defs/JobList".
package imecschema

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

//go:embed *.json
var files embed.FS

// base is the URL the schema files are registered under (they are never fetched).
const base = "https://opengpulab.example/imec/"

// Schemas compiles models on first use and keeps them.
type Schemas struct {
	mu       sync.Mutex
	compiler *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema
}

// Load registers every embedded schema file, with format assertions on (date-time with an
// offset is imec's AwareDatetime, email its EmailStr).
func Load() (*Schemas, error) {
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	names, err := fs.Glob(files, "*.json")
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		data, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("read schema %s: %w", name, err)
		}
		if err := c.AddResource(base+name, doc); err != nil {
			return nil, fmt.Errorf("add schema %s: %w", name, err)
		}
	}
	return &Schemas{compiler: c, compiled: map[string]*jsonschema.Schema{}}, nil
}

// Validate checks a JSON document against a model ("job.json#/$defs/Job"). The error lists
// every violation with its JSON pointer.
func (s *Schemas) Validate(model string, data []byte) error {
	s.mu.Lock()
	sch, ok := s.compiled[model]
	if !ok {
		var err error
		if sch, err = s.compiler.Compile(base + model); err != nil {
			s.mu.Unlock()
			return fmt.Errorf("compile %s: %w", model, err)
		}
		s.compiled[model] = sch
	}
	s.mu.Unlock()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if err := sch.Validate(doc); err != nil {
		return fmt.Errorf("not imec's %s: %w", model, err)
	}
	return nil
}

// File returns a schema file's text ("job.json"), for tests that compare other documents (the
// OpenAPI document) with it.
func File(name string) ([]byte, error) {
	return files.ReadFile(name)
}
