package main

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/sim/cost"
	"github.com/ibex-rdma/ibex/sim/topo"
)

const simYAMLDoc = "../../docs/sim-yaml.md"

// TestSimYAMLDoc: every ```yaml block of docs/sim-yaml.md loads with the
// real loader (a topology, with kind:, builds and checks; the others
// override the default cost table), and every field the loaders accept
// is named in the doc, so that the doc cannot rot.
func TestSimYAMLDoc(t *testing.T) {
	b, err := os.ReadFile(simYAMLDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(doc, -1)
	var topos, costs int
	for i, m := range blocks {
		y := m[1]
		if regexp.MustCompile(`(?m)^kind:`).MatchString(y) {
			topos++
			s, err := topo.Parse([]byte(y))
			if err != nil {
				t.Errorf("block %d: %v\n%s", i, err, y)
				continue
			}
			g, err := s.Build()
			if err != nil {
				t.Errorf("block %d: build: %v", i, err)
				continue
			}
			if err := g.Check(); err != nil {
				t.Errorf("block %d: check: %v", i, err)
			}
			continue
		}
		costs++
		if _, err := cost.Default().Override([]byte(y)); err != nil {
			t.Errorf("block %d: %v\n%s", i, err, y)
		}
	}
	if topos < 3 || costs < 1 {
		t.Errorf("%d topology and %d cost examples, want 3 and 1 or more", topos, costs)
	}
	for _, typ := range []reflect.Type{reflect.TypeOf(topo.Spec{}), reflect.TypeOf(cost.Table{})} {
		for _, f := range yamlFields(typ, map[reflect.Type]bool{}) {
			if !strings.Contains(doc, "`"+f+"`") {
				t.Errorf("%s accepts %q, which %s does not name", typ, f, simYAMLDoc)
			}
		}
	}
}

// yamlFields returns the yaml names of t's fields and of the structs it
// holds (through pointers, slices and maps).
func yamlFields(t reflect.Type, seen map[reflect.Type]bool) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return nil
	}
	seen[t] = true
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, name)
		out = append(out, yamlFields(f.Type, seen)...)
	}
	return out
}
