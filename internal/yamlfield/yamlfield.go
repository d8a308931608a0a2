// Package yamlfield decodes one YAML document into Go structs strictly and
// says what was wrong in the file's own words: the field's path
// ("explicit.nodes[1].prots"), the value as written, what is wanted, and
// the line. Each package that reads a YAML file keeps its own error type
// and sentinel; a Schema tells this package how to make them.
package yamlfield

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrEmpty is what Decode returns, alone, for data with no YAML document
// in it (empty, or comments only), so that each caller decides whether
// that is an empty value or a mistake.
var ErrEmpty = errors.New("no YAML document")

// Schema is what a package's files decode into and how their errors read.
type Schema struct {
	What  string              // what one file holds, for "want one spec per file"
	Err   error               // the package's sentinel; every error but ErrEmpty wraps it
	Field func(Problem) error // the package's error for one field, wrapping Err

	// Types are the struct types a file decodes into: an unknown-field
	// error lists the yaml names of the one the field was found in.
	Types []reflect.Type
	// Words says the package's own types in words, by the name yaml gives
	// them: "time.Duration": "a duration such as 250ns". Types not named
	// here or in Mappings get the generic words (an integer, a list, ...).
	Words map[string]string
	// Mappings are prefixes of the type names that a file gives as a
	// mapping ("topo.", "map["): a value of the wrong kind for them wants
	// "a mapping".
	Mappings []string
}

// Problem is one field a file gives that cannot be used.
type Problem struct {
	Field string // the path in the file: "fattree.k", "explicit.links[3].rate"
	Value string // the value as written; empty when missing or not scalar
	Want  string // what would be accepted
	Line  int    // line in the file, when known
}

// String reads "fattree.k: 63: want an even number (line 2)", leaving
// out the value when there is none and the line when it is not known.
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.Field)
	b.WriteString(": ")
	if p.Value != "" {
		b.WriteString(p.Value)
		b.WriteString(": ")
	}
	b.WriteString(p.Want)
	if p.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", p.Line)
	}
	return b.String()
}

// Decode reads the one YAML document of data into v, strictly: unknown
// fields and values of the wrong type are s.Field errors naming the
// field's path and line, joined when there are several. It returns the
// line of every path the file gives ("switches", "switches.a",
// "switches.a.cost_usd", list items as "optics[1]"), the first when a key
// and its value stand on different lines. Data with no document returns
// ErrEmpty and leaves v as it is.
func (s *Schema) Decode(data []byte, v any) (map[string]int, error) {
	// The node tree maps the decoder's line numbers back to field paths;
	// parsing it first also reports syntax errors before type errors.
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%w: %v", s.Err, err)
	}
	if root.Kind == 0 {
		return nil, ErrEmpty
	}
	idx := indexNodes(&root)

	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(v)
	var te *yaml.TypeError
	switch {
	case errors.As(err, &te):
		errs := make([]error, 0, len(te.Errors))
		for _, msg := range te.Errors {
			if p, ok := idx.explain(msg, s); ok {
				errs = append(errs, s.Field(p))
			} else {
				errs = append(errs, fmt.Errorf("%w: %s", s.Err, msg))
			}
		}
		return nil, errors.Join(errs...)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", s.Err, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, fmt.Errorf("%w: more than one YAML document; want one %s per file", s.Err, s.What)
	}
	lines := make(map[string]int, len(idx))
	for _, e := range idx {
		if _, ok := lines[e.path]; !ok {
			lines[e.path] = e.line
		}
	}
	return lines, nil
}

// knownFields lists the yaml names of the fields of the schema's type
// that yaml calls typeName ("topo.FatTree").
func (s *Schema) knownFields(typeName string) string {
	for _, t := range s.Types {
		if t.String() != typeName {
			continue
		}
		var names []string
		for f := range t.Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" {
				names = append(names, name)
			}
		}
		return strings.Join(names, ", ")
	}
	return "those of " + typeName
}

// typeWords says in words what a value of the Go type yaml names t is.
func (s *Schema) typeWords(t string) string {
	if w, ok := s.Words[t]; ok {
		return w
	}
	switch {
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "string":
		return "a string"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	}
	for _, p := range s.Mappings {
		if strings.HasPrefix(t, p) {
			return "a mapping"
		}
	}
	return t
}
