package yamlfield

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type port struct {
	Name string  `yaml:"name"`
	Rate float64 `yaml:"rate,omitempty"`
	Note string  // no yaml tag: not a known field
}

type box struct {
	Kind  string  `yaml:"kind"`
	Ports []port  `yaml:"ports"`
	Limit int     `yaml:"limit"`
	Inner *limits `yaml:"inner"`
}

type limits struct {
	Max int `yaml:"max"`
}

var errBox = errors.New("bad box")

type fieldErr struct{ Problem }

func (e *fieldErr) Error() string { return e.String() }
func (e *fieldErr) Unwrap() error { return errBox }

var boxSchema = Schema{
	What:     "box",
	Err:      errBox,
	Field:    func(p Problem) error { return &fieldErr{p} },
	Types:    []reflect.Type{reflect.TypeFor[box](), reflect.TypeFor[port](), reflect.TypeFor[limits]()},
	Words:    map[string]string{"yamlfield.limits": "{max: N}"},
	Mappings: []string{"yamlfield."},
}

const doc = `kind: rack
ports:
  - name: a
  - {name: b, rate: 400}
inner:
  max: 3
`

func TestIndexPathsAndLines(t *testing.T) {
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &root); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range indexNodes(&root) {
		got = append(got, fmt.Sprintf("%s@%d", e.path, e.line))
	}
	// A key whose value starts on a later line has an entry for each line.
	want := []string{
		"kind@1", "ports@2", "ports@3", "ports[0]@3", "ports[0].name@3",
		"ports[1]@4", "ports[1].name@4", "ports[1].rate@4",
		"inner@5", "inner@6", "inner.max@6",
	}
	if !slices.Equal(got, want) {
		t.Errorf("index:\n got %v\nwant %v", got, want)
	}
}

func TestDecodeLines(t *testing.T) {
	var b box
	lines, err := boxSchema.Decode([]byte(doc), &b)
	if err != nil {
		t.Fatal(err)
	}
	if b.Kind != "rack" || len(b.Ports) != 2 || b.Ports[1].Rate != 400 || b.Inner.Max != 3 {
		t.Errorf("decoded %+v", b)
	}
	// The first line of a path is the key's.
	for p, l := range map[string]int{"kind": 1, "ports": 2, "ports[1].rate": 4, "inner": 5, "inner.max": 6} {
		if lines[p] != l {
			t.Errorf("line of %s = %d, want %d", p, lines[p], l)
		}
	}
	if len(lines) != 9 {
		t.Errorf("%d paths, want 9: %v", len(lines), lines)
	}
}

func explainOne(t *testing.T, yml string) (Problem, bool) {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(yml), &root); err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(yml))
	dec.KnownFields(true)
	var b box
	var te *yaml.TypeError
	if !errors.As(dec.Decode(&b), &te) || len(te.Errors) != 1 {
		t.Fatalf("%q: want one type error, got %v", yml, te)
	}
	return indexNodes(&root).explain(te.Errors[0], &boxSchema)
}

func TestExplainNotFound(t *testing.T) {
	p, ok := explainOne(t, "kind: rack\nports:\n  - {name: a, rte: 400}\n")
	want := Problem{Field: "ports[0].rte", Want: "unknown field; known fields are name, rate", Line: 3}
	if !ok || p != want {
		t.Errorf("explain = %+v, %v; want %+v", p, ok, want)
	}
}

func TestExplainTypeMismatch(t *testing.T) {
	for _, c := range []struct {
		yml  string
		want Problem
	}{
		{"limit: lots\n", Problem{Field: "limit", Value: "lots", Want: "want an integer", Line: 1}},
		{"ports:\n  - {rate: fast}\n", Problem{Field: "ports[0].rate", Value: "fast", Want: "want a number", Line: 2}},
		{"kind: [a]\n", Problem{Field: "kind", Value: "a list", Want: "want a string", Line: 1}},
		{"ports: {a: 1}\n", Problem{Field: "ports", Value: "a mapping", Want: "want a list", Line: 1}},
		{"inner: 3\n", Problem{Field: "inner", Value: "3", Want: "want {max: N}", Line: 1}},
		// yaml cuts long values short with "..."; the entry is still found.
		{"limit: manymanymany\n", Problem{Field: "limit", Value: "manymanymany", Want: "want an integer", Line: 1}},
	} {
		p, ok := explainOne(t, c.yml)
		if !ok || p != c.want {
			t.Errorf("%q: explain = %+v, %v; want %+v", c.yml, p, ok, c.want)
		}
	}
	var root yaml.Node
	if _, ok := indexNodes(&root).explain("not yaml's words", &boxSchema); ok {
		t.Error("explained a message that does not parse")
	}
}

func TestKnownFields(t *testing.T) {
	for name, want := range map[string]string{
		"yamlfield.box":   "kind, ports, limit, inner",
		"yamlfield.port":  "name, rate", // the ",omitempty" cut off; the untagged field left out
		"yamlfield.other": "those of yamlfield.other",
	} {
		if got := boxSchema.knownFields(name); got != want {
			t.Errorf("knownFields(%s) = %q, want %q", name, got, want)
		}
	}
}

func TestTypeWords(t *testing.T) {
	for in, want := range map[string]string{
		"int": "an integer", "uint16": "an integer", "float64": "a number", "string": "a string",
		"[]string": "a list", "yamlfield.limits": "{max: N}", "yamlfield.box": "a mapping", "bool": "bool",
	} {
		if got := boxSchema.typeWords(in); got != want {
			t.Errorf("typeWords(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, c := range []struct{ yml, want string }{
		{"kind: rack\nlimit: x\nports: [{nme: a}]\n", "limit: x: want an integer (line 2)\nports[0].nme: unknown field; known fields are name, rate (line 3)"},
		{"kind: [\n", "bad box: yaml: line 1: did not find expected node content"},
		{"kind: a\n---\nkind: b\n", "bad box: more than one YAML document; want one box per file"},
		{"[1]\n", "bad box: line 1: cannot unmarshal !!seq into yamlfield.box"},
	} {
		var b box
		_, err := boxSchema.Decode([]byte(c.yml), &b)
		if err == nil || err.Error() != c.want || !errors.Is(err, errBox) {
			t.Errorf("%q: error %v, want %q wrapping errBox", c.yml, err, c.want)
		}
	}
	var fe *fieldErr
	if _, err := boxSchema.Decode([]byte("limit: x\n"), &box{}); !errors.As(err, &fe) || fe.Field != "limit" {
		t.Errorf("error %v is not the schema's field error", err)
	}
	for _, yml := range []string{"", "# only a comment\n"} {
		b := box{Kind: "kept"}
		if _, err := boxSchema.Decode([]byte(yml), &b); err != ErrEmpty || b.Kind != "kept" {
			t.Errorf("%q: error %v, kind %q; want ErrEmpty, v untouched", yml, err, b.Kind)
		}
	}
}

func TestProblemString(t *testing.T) {
	for p, want := range map[Problem]string{
		{Field: "fattree.k", Value: "63", Want: "want an even number", Line: 2}: "fattree.k: 63: want an even number (line 2)",
		{Field: "kind", Want: "missing: want fattree"}:                          "kind: missing: want fattree",
	} {
		if got := p.String(); got != want {
			t.Errorf("%+v: %q, want %q", p, got, want)
		}
	}
}
