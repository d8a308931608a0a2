package cost

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// decode reads one YAML document into a Table, strictly: unknown fields and
// values of the wrong type are *FieldErrors naming the field's path and
// line. It also returns the set of paths the file gives ("switches",
// "switches.ib-ndr-64", "switches.ib-ndr-64.cost_usd", ...), which is what
// an override replaces. An empty document is an empty table.
func decode(data []byte) (*Table, map[string]bool, error) {
	// The node tree maps the decoder's line numbers back to field paths;
	// parsing it first also reports syntax errors before type errors.
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrTable, err)
	}
	t := &Table{lines: map[string]int{}}
	given := map[string]bool{}
	if root.Kind == 0 {
		return t, given, nil
	}
	idx := indexNodes(&root)

	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(t)
	var te *yaml.TypeError
	switch {
	case errors.As(err, &te):
		errs := make([]error, 0, len(te.Errors))
		for _, msg := range te.Errors {
			errs = append(errs, idx.explain(msg))
		}
		return nil, nil, errors.Join(errs...)
	case err != nil:
		return nil, nil, fmt.Errorf("%w: %v", ErrTable, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, nil, fmt.Errorf("%w: more than one YAML document; want one table per file", ErrTable)
	}
	for _, e := range idx {
		given[e.path] = true
		if _, ok := t.lines[e.path]; !ok {
			t.lines[e.path] = e.line
		}
	}
	return t, given, nil
}

// checkValuesGiven rejects a Value the file gives without its value: a
// missing number would silently be 0, a free switch or a free watt.
func checkValuesGiven(t *Table, given map[string]bool) error {
	var errs []error
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		for i := range v.NumField() {
			name := yamlName(v.Type().Field(i))
			if name == "" {
				continue
			}
			p := joinPath(path, name)
			f := v.Field(i)
			switch {
			case f.Type() == valueType:
				if given[p] && !given[p+".value"] {
					errs = append(errs, &FieldError{Field: p + ".value", Want: "missing: a value is given whole, as {value, confidence, source}", Line: t.lines[p]})
				}
			case f.Kind() == reflect.Map:
				for _, k := range f.MapKeys() {
					if e := f.MapIndex(k); !e.IsNil() {
						walk(e.Elem(), p+"."+k.String())
					}
				}
			}
		}
	}
	walk(reflect.ValueOf(t).Elem(), "")
	return errors.Join(errs...)
}

// merge copies into dst every field of src that the file gives. A field is
// replaced whole (a Value, a string, the optics list), except the part
// maps: a part already in dst has its given fields replaced, a new part is
// added as it is (validate then finds what it lacks). The lines of what it
// replaces are dropped, so that errors point into the file that gave it.
func merge(dst, src *Table, given map[string]bool) {
	var replaced []string
	mergeStruct(reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem(), "", given, &replaced)
	for p := range dst.lines {
		for _, r := range replaced {
			if p == r || strings.HasPrefix(p, r+".") || strings.HasPrefix(p, r+"[") {
				delete(dst.lines, p)
				break
			}
		}
	}
	maps.Copy(dst.lines, src.lines)
}

func mergeStruct(dst, src reflect.Value, path string, given map[string]bool, replaced *[]string) {
	for i := range dst.NumField() {
		name := yamlName(dst.Type().Field(i))
		if name == "" {
			continue
		}
		p := joinPath(path, name)
		if !given[p] {
			continue
		}
		df, sf := dst.Field(i), src.Field(i)
		if df.Kind() != reflect.Map {
			df.Set(sf)
			*replaced = append(*replaced, p)
			continue
		}
		if df.IsNil() {
			df.Set(reflect.MakeMap(df.Type()))
		}
		for _, k := range sf.MapKeys() {
			sv, dv := sf.MapIndex(k), df.MapIndex(k)
			switch {
			case !dv.IsValid() || dv.IsNil():
				df.SetMapIndex(k, sv)
			case !sv.IsNil():
				mergeStruct(dv.Elem(), sv.Elem(), p+"."+k.String(), given, replaced)
			}
		}
	}
}

var valueType = reflect.TypeFor[Value]()

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// yamlEntry is one value of the file: its path, line, the key it is under
// ("" for a list item) and its node.
type yamlEntry struct {
	path string
	line int
	key  string
	val  *yaml.Node
}

type yamlIndex []yamlEntry

func indexNodes(root *yaml.Node) yamlIndex {
	var idx yamlIndex
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := joinPath(path, k.Value)
				idx = append(idx, yamlEntry{path: p, line: k.Line, key: k.Value, val: v})
				if v.Line != k.Line {
					idx = append(idx, yamlEntry{path: p, line: v.Line, key: k.Value, val: v})
				}
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := path + "[" + strconv.Itoa(i) + "]"
				idx = append(idx, yamlEntry{path: p, line: c.Line, val: c})
				walk(c, p)
			}
		}
	}
	walk(root, "")
	return idx
}

var (
	yamlLineRE     = regexp.MustCompile(`^line (\d+): (.*)$`)
	yamlNotFoundRE = regexp.MustCompile(`^field (\S+) not found in type (\S+)$`)
	yamlCannotRE   = regexp.MustCompile("^cannot unmarshal !!(\\w+)(?: `(.*)`)? into (\\S+)$")
)

// explain turns one of yaml's "line N: ..." type errors into a FieldError
// naming the field's path, or wraps it as it is if it does not parse.
func (idx yamlIndex) explain(msg string) error {
	m := yamlLineRE.FindStringSubmatch(msg)
	if m == nil {
		return fmt.Errorf("%w: %s", ErrTable, msg)
	}
	line, _ := strconv.Atoi(m[1])
	if f := yamlNotFoundRE.FindStringSubmatch(m[2]); f != nil {
		for _, e := range idx {
			if e.line == line && e.key == f[1] {
				return &FieldError{Field: e.path, Want: "unknown field; known fields are " + knownFields(f[2]), Line: line}
			}
		}
	}
	if c := yamlCannotRE.FindStringSubmatch(m[2]); c != nil {
		tag, value, into := c[1], c[2], c[3]
		prefix := strings.TrimSuffix(value, "...")
		for _, e := range idx {
			if e.line != line {
				continue
			}
			var ok bool
			switch tag {
			case "seq":
				ok = e.val.Kind == yaml.SequenceNode
			case "map":
				ok = e.val.Kind == yaml.MappingNode
			default:
				ok = e.val.Kind == yaml.ScalarNode && strings.HasPrefix(e.val.Value, prefix)
			}
			if !ok {
				continue
			}
			v := e.val.Value
			switch e.val.Kind {
			case yaml.SequenceNode:
				v = "a list"
			case yaml.MappingNode:
				v = "a mapping"
			}
			return &FieldError{Field: e.path, Value: v, Want: "want " + goTypeWords(into), Line: line}
		}
	}
	return fmt.Errorf("%w: %s", ErrTable, msg)
}

// tableTypes are the types a table decodes into, for the list of known
// fields an unknown-field error gives.
var tableTypes = []reflect.Type{
	reflect.TypeFor[Table](), reflect.TypeFor[Value](), reflect.TypeFor[Switch](),
	reflect.TypeFor[NIC](), reflect.TypeFor[Transceiver](),
}

func knownFields(typeName string) string {
	for _, t := range tableTypes {
		if t.String() != typeName {
			continue
		}
		var names []string
		for f := range t.Fields() {
			if name := yamlName(f); name != "" {
				names = append(names, name)
			}
		}
		return strings.Join(names, ", ")
	}
	return "those of " + typeName
}

func goTypeWords(t string) string {
	switch {
	case t == "cost.Value":
		return "{value: N, confidence: measured|primary|secondary|estimate, source: \"...\"}"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "string" || t == "cost.LinkLayer" || t == "cost.Confidence":
		return "a string"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["), strings.HasPrefix(t, "cost."), strings.HasPrefix(t, "*cost."):
		return "a mapping"
	}
	return t
}
