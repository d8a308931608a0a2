package yamlfield

import (
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// entry is one value of the file: its path, line, the key it is under
// ("" for a list item) and its node.
type entry struct {
	path string
	line int
	key  string
	val  *yaml.Node
}

// index is every value of a file in document order; a value whose key
// and value stand on different lines has an entry for each line.
type index []entry

func indexNodes(root *yaml.Node) index {
	var idx index
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
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				idx = append(idx, entry{path: p, line: k.Line, key: k.Value, val: v})
				if v.Line != k.Line {
					idx = append(idx, entry{path: p, line: v.Line, key: k.Value, val: v})
				}
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := path + "[" + strconv.Itoa(i) + "]"
				idx = append(idx, entry{path: p, line: c.Line, val: c})
				walk(c, p)
			}
		}
	}
	walk(root, "")
	return idx
}

var (
	lineRE     = regexp.MustCompile(`^line (\d+): (.*)$`)
	notFoundRE = regexp.MustCompile(`^field (\S+) not found in type (\S+)$`)
	cannotRE   = regexp.MustCompile("^cannot unmarshal !!(\\w+)(?: `(.*)`)? into (\\S+)$")
)

// explain turns one of yaml's "line N: ..." type errors into a Problem
// naming the field's path; false if msg does not parse or names no value
// of the file.
func (idx index) explain(msg string, s *Schema) (Problem, bool) {
	m := lineRE.FindStringSubmatch(msg)
	if m == nil {
		return Problem{}, false
	}
	line, _ := strconv.Atoi(m[1])
	if f := notFoundRE.FindStringSubmatch(m[2]); f != nil {
		for _, e := range idx {
			if e.line == line && e.key == f[1] {
				return Problem{Field: e.path, Want: "unknown field; known fields are " + s.knownFields(f[2]), Line: line}, true
			}
		}
	}
	if c := cannotRE.FindStringSubmatch(m[2]); c != nil {
		tag, value, into := c[1], c[2], c[3]
		// yaml cuts long values short with "...".
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
			return Problem{Field: e.path, Value: v, Want: "want " + s.typeWords(into), Line: line}, true
		}
	}
	return Problem{}, false
}
