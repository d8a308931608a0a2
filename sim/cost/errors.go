package cost

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ibex-rdma/ibex/internal/yamlfield"
	"github.com/ibex-rdma/ibex/sim/topo"
)

var (
	// ErrTable is wrapped by every error about a table's content.
	ErrTable = errors.New("bad cost table")
	// ErrNoPart is wrapped by the errors of Compute when the table has no
	// part for something the graph holds.
	ErrNoPart = errors.New("no part in the cost table")
)

// FieldError is a table field with a value Parse or Override cannot use.
type FieldError struct {
	Field string // the path in the file: "switches.ib-ndr-64.cost_usd.source"
	Value string // the value as written; empty when missing or not scalar
	Want  string // what would be accepted
	Line  int    // line in the file, when known
}

func (e *FieldError) Error() string {
	return yamlfield.Problem{Field: e.Field, Value: e.Value, Want: e.Want, Line: e.Line}.String()
}

func (e *FieldError) Unwrap() error { return ErrTable }

// NoPartError says that no table entry fits a switch, a NIC or an optical
// link of the graph, and lists the entries there are.
type NoPartError struct {
	Kind      string // "switch", "nic" or "transceiver"
	LinkLayer LinkLayer
	Rate      topo.Rate
	Ports     int     // switches: the radix looked for
	LengthM   float64 // transceivers: the link's length
	Where     string  // the node or port, as topo names it
	Have      []string
}

func (e *NoPartError) Error() string {
	var b strings.Builder
	switch e.Kind {
	case "switch":
		fmt.Fprintf(&b, "no %s switch entry for %v with %d ports (%s)", e.LinkLayer, e.Rate, e.Ports, e.Where)
	case "nic":
		fmt.Fprintf(&b, "no %s NIC entry for %v (%s)", e.LinkLayer, e.Rate, e.Where)
	default:
		fmt.Fprintf(&b, "no transceiver reaches %g m (%s)", e.LengthM, e.Where)
	}
	if len(e.Have) == 0 {
		b.WriteString("; the table has none")
	} else {
		b.WriteString("; the table has ")
		b.WriteString(strings.Join(e.Have, ", "))
	}
	return b.String()
}

func (e *NoPartError) Unwrap() error { return ErrNoPart }
