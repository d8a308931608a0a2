package metrics_test

import (
	"testing"

	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/metrics"
	"github.com/ibex-rdma/ibex/verbs"
)

// TestPKeyViolations: a port's PKeyViolations (udp's partition
// enforcement) is its PortRcvConstraintErrors too, and stays in Extra
// under its own name, as SrcAddrErrors does.
func TestPKeyViolations(t *testing.T) {
	st := ibexdwire.Status{Devices: []ibexdwire.DeviceStatus{{Name: "udp0", Counters: []verbs.PortCounter{
		{Name: "PortRcvErrors", Value: 4}, {Name: "SrcAddrErrors", Value: 4}, {Name: "PKeyViolations", Value: 5}}}}}
	p, ok := metrics.FromStatus(st).Port("udp0", 1)
	if !ok {
		t.Fatal("no udp0/1")
	}
	for n, want := range map[string]uint64{"PortRcvConstraintErrors": 5, "PKeyViolations": 5, "SrcAddrErrors": 4, "PortRcvErrors": 4, "PortXmitConstraintErrors": 0} {
		if got := value(t, p, n); got != want {
			t.Errorf("%s = %d, want %d", n, got, want)
		}
	}
}
