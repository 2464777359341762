package ktest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The machine outputs that have a schema in docs/schemas (NAME.v1.json).
const (
	SchemaEvents    = "events"
	SchemaLs        = "ls"
	SchemaReconcile = "reconcile"
	SchemaDoctor    = "doctor"
	SchemaProve     = "prove-deathwatch"
)

// Schemas names every schema the outputs are checked against.
var Schemas = []string{SchemaEvents, SchemaLs, SchemaReconcile, SchemaDoctor, SchemaProve}

const schemaBase = "https://deathwatch.invalid/schemas/"

var schemas struct {
	once    sync.Once
	err     error
	byName  map[string]*jsonschema.Schema
	mu      sync.Mutex
	checked map[string]int
}

// SchemaDir is where the schemas are.
func SchemaDir() string { return filepath.Join(RepoRoot(), "docs", "schemas") }

// compileSchemas compiles every schema once, formats asserted (a time
// must be RFC 3339).
func compileSchemas() (map[string]*jsonschema.Schema, error) {
	schemas.once.Do(func() {
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		for _, name := range Schemas {
			f, err := os.Open(filepath.Join(SchemaDir(), name+".v1.json"))
			if err != nil {
				schemas.err = err
				return
			}
			doc, err := jsonschema.UnmarshalJSON(f)
			f.Close()
			if err != nil {
				schemas.err = fmt.Errorf("schema %s: %w", name, err)
				return
			}
			if err := c.AddResource(schemaBase+name+".v1.json", doc); err != nil {
				schemas.err = fmt.Errorf("schema %s: %w", name, err)
				return
			}
		}
		schemas.byName = map[string]*jsonschema.Schema{}
		for _, name := range Schemas {
			s, err := c.Compile(schemaBase + name + ".v1.json")
			if err != nil {
				schemas.err = fmt.Errorf("compile schema %s: %w", name, err)
				return
			}
			schemas.byName[name] = s
		}
		schemas.checked = map[string]int{}
	})
	return schemas.byName, schemas.err
}

// ValidateOutput says why out (one JSON document) does not validate
// against the schema name, or nil.
func ValidateOutput(name string, out []byte) error {
	byName, err := compileSchemas()
	if err != nil {
		return err
	}
	s, ok := byName[name]
	if !ok {
		return fmt.Errorf("no schema %q", name)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(out))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if err := s.Validate(doc); err != nil {
		return err
	}
	schemas.mu.Lock()
	schemas.checked[name]++
	schemas.mu.Unlock()
	return nil
}

// CheckOutput fails t when out, a real output of the supervisor, does
// not validate against the schema name.
func CheckOutput(t testing.TB, name string, out []byte) {
	t.Helper()
	if err := ValidateOutput(name, out); err != nil {
		t.Errorf("the %s output does not validate against docs/schemas/%s.v1.json: %v\noutput: %s", name, name, err, out)
	}
}

// CheckEvents checks each line of an --events output against the
// events schema; a last line not yet ended (a supervisor still
// writing) is left out.
func CheckEvents(t testing.TB, out []byte) {
	t.Helper()
	out = out[:bytes.LastIndexByte(out, '\n')+1]
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) > 0 {
			CheckOutput(t, SchemaEvents, sc.Bytes())
		}
	}
}

// SchemaSummary says how many outputs of each schema validated in
// this run.
func SchemaSummary() string {
	schemas.mu.Lock()
	defer schemas.mu.Unlock()
	var parts []string
	for name, n := range schemas.checked {
		parts = append(parts, fmt.Sprintf("%s %d", name, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
