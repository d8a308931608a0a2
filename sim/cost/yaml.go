package cost

import (
	"errors"
	"maps"
	"reflect"
	"strings"

	"github.com/ibex-rdma/ibex/internal/yamlfield"
)

// decode reads one YAML document into a Table, strictly: unknown fields and
// values of the wrong type are *FieldErrors naming the field's path and
// line. It also returns the set of paths the file gives ("switches",
// "switches.ib-ndr-64", "switches.ib-ndr-64.cost_usd", ...), which is what
// an override replaces. An empty document is an empty table.
func decode(data []byte) (*Table, map[string]bool, error) {
	t := &Table{}
	lines, err := tableSchema.Decode(data, t)
	switch {
	case errors.Is(err, yamlfield.ErrEmpty):
		t.lines = map[string]int{}
		return t, map[string]bool{}, nil
	case err != nil:
		return nil, nil, err
	}
	t.lines = lines
	given := make(map[string]bool, len(lines))
	for p := range lines {
		given[p] = true
	}
	return t, given, nil
}

// tableSchema is how a table file decodes and how its errors read.
var tableSchema = yamlfield.Schema{
	What: "table",
	Err:  ErrTable,
	Field: func(p yamlfield.Problem) error {
		return &FieldError{Field: p.Field, Value: p.Value, Want: p.Want, Line: p.Line}
	},
	Types: []reflect.Type{
		reflect.TypeFor[Table](), reflect.TypeFor[Value](), reflect.TypeFor[Switch](),
		reflect.TypeFor[NIC](), reflect.TypeFor[Transceiver](),
	},
	Words: map[string]string{
		"cost.Value":      "{value: N, confidence: measured|primary|secondary|estimate, source: \"...\"}",
		"cost.LinkLayer":  "a string",
		"cost.Confidence": "a string",
	},
	Mappings: []string{"map[", "cost.", "*cost."},
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
