package metrics

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/provider/ibexd"
	"github.com/ibex-rdma/ibex/verbs"
)

// Counter is one named counter.
type Counter struct {
	Name  string `json:"name"`
	Value uint64 `json:"value"`
}

// Port is one port of a device.
type Port struct {
	Device string    `json:"device"`
	Port   uint8     `json:"port"`
	PMA    []Counter `json:"pma"`             // PortNames order, every name present
	HW     []Counter `json:"hw"`              // HWNames order, every name present (sums over the device's QPs + device-level)
	Extra  []Counter `json:"extra,omitempty"` // provider counters with no standard name (ICRCErrors, UnknownQP, ...), then the QPs' Extra summed
}

// QP is one queue pair.
type QP struct {
	Device string    `json:"device"`
	QPN    uint32    `json:"qpn"`
	State  string    `json:"state"`
	PID    int       `json:"pid,omitempty"`   // the owning process (daemon snapshots)
	HW     []Counter `json:"hw"`              // HWNames order
	Extra  []Counter `json:"extra,omitempty"` // ibex's own per-QP counters (retransmits, cnps_sent, ...: see qpExtraNames)
}

// Snapshot is the counters of a process's or a daemon's ports and QPs at
// one time.
type Snapshot struct {
	Time    time.Time `json:"time"`
	Source  string    `json:"source"` // "pid 1234" or "daemon /run/ibex/ibexd.sock"
	Ports   []Port    `json:"ports"`
	QPs     []QP      `json:"qps"`
	Tenants []Tenant  `json:"tenants,omitempty"` // a daemon's
}

// Tenant is one tenant of a daemon: what its processes hold together
// (qps, cqs, mrs, mr_bytes), the quotas it has (max_clients, max_qps, max_cqs, max_mrs,
// max_memory in bytes, rate in bytes per second; those not set are left
// out), and how many engine passes held its send WQEs back for its rate.
type Tenant struct {
	Name      string    `json:"name"`
	Processes int       `json:"processes"`
	Held      []Counter `json:"held"`
	Quotas    []Counter `json:"quotas"`
	RateHeld  uint64    `json:"rate_held"`
}

// Port finds a port of the snapshot.
func (s Snapshot) Port(device string, port uint8) (Port, bool) {
	for _, p := range s.Ports {
		if p.Device == device && p.Port == port {
			return p, true
		}
	}
	return Port{}, false
}

// Value finds a counter of the port by name, in PMA, HW and Extra.
func (p Port) Value(name string) (uint64, bool) { return find(name, p.PMA, p.HW, p.Extra) }

// Value finds a counter of the QP by name, in HW and Extra.
func (q QP) Value(name string) (uint64, bool) { return find(name, q.HW, q.Extra) }

func find(name string, lists ...[]Counter) (uint64, bool) {
	for _, l := range lists {
		for _, c := range l {
			if c.Name == name {
				return c.Value, true
			}
		}
	}
	return 0, false
}

// Process takes a snapshot of this process: every open verbs.Context
// (verbs.Contexts), each device's ports once however many contexts it has,
// and every QP. A port's PMA counters are the provider's (zero where it
// keeps none: loopback); its HW counters sum its QPs, live and destroyed.
func Process() Snapshot {
	s := Snapshot{Time: time.Now(), Source: fmt.Sprintf("pid %d", os.Getpid()), Ports: []Port{}, QPs: []QP{}}
	type group struct {
		key, name string
		ctxs      []*verbs.Context
	}
	var groups []*group
	for _, c := range verbs.Contexts() {
		key := c.Provider() + "/" + c.Name()
		i := slices.IndexFunc(groups, func(g *group) bool { return g.key == key })
		if i < 0 {
			groups = append(groups, &group{key: key, name: c.Name()})
			i = len(groups) - 1
		}
		groups[i].ctxs = append(groups[i].ctxs, c)
	}
	for _, g := range groups {
		// Two providers' devices of one name (ibexd/udp0 and udp/udp0):
		// each port says which.
		if slices.ContainsFunc(groups, func(o *group) bool { return o != g && o.name == g.name }) {
			g.name = g.key
		}
	}
	for _, g := range groups {
		first := g.ctxs[0] // the device's counters are the same from any of its contexts
		sums := map[uint8]*verbs.QPStats{}
		for _, c := range g.ctxs {
			for _, qp := range c.QPs() {
				st := qp.Stats()
				port := qp.Query().Port
				if port == 0 { // RESET: no port yet
					port = 1
				}
				if sums[port] == nil {
					sums[port] = &verbs.QPStats{}
				}
				sums[port].Add(&st)
				s.QPs = append(s.QPs, QP{Device: g.name, QPN: qp.Num(), State: qp.State().String(), HW: hwOf(&st), Extra: qpExtraOf(&st)})
			}
		}
		for port := uint8(1); port <= first.QueryDevice().PhysPortCnt && port != 0; port++ {
			sum := first.DestroyedQPStats(port)
			if q := sums[port]; q != nil {
				sum.Add(q)
			}
			pcs, _ := first.PortCounters(port) // nil: the provider keeps none
			pma, extra := pmaOf(pcs, first.LinkDowned(port))
			s.Ports = append(s.Ports, portOf(g.name, port, pma, extra, &sum))
		}
	}
	return s
}

// FromStatus maps a daemon's status: each of its devices as port 1 (a udp
// device has one), whose HW counters sum the QPs of the processes attached
// to it, and every attached process's QPs, with its PID. The daemon's
// status carries the QPs that exist: a process that detaches takes its
// QPs' counts out of the port's HW sums (the PMA counters, the device's
// own, stay).
func FromStatus(st ibexdwire.Status) Snapshot {
	s := Snapshot{Time: time.Now(), Source: "daemon " + st.Socket, Ports: []Port{}, QPs: []QP{}}
	sums := map[string]*verbs.QPStats{}
	for _, c := range st.Clients {
		for _, q := range c.QPs {
			if sums[c.Device] == nil {
				sums[c.Device] = &verbs.QPStats{}
			}
			sums[c.Device].Add(&q.Stats)
			s.QPs = append(s.QPs, QP{Device: c.Device, QPN: q.QPN, State: q.State, PID: c.PID, HW: hwOf(&q.Stats), Extra: qpExtraOf(&q.Stats)})
		}
	}
	slices.SortStableFunc(s.QPs, func(a, b QP) int {
		return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.QPN, b.QPN))
	})
	for _, d := range st.Devices {
		sum := sums[d.Name]
		if sum == nil {
			sum = &verbs.QPStats{}
		}
		if d.Destroyed != nil {
			// The QPs gone with the processes that detached still count.
			sum.Add(d.Destroyed)
		}
		pma, extra := pmaOf(d.Counters, 0)
		s.Ports = append(s.Ports, portOf(d.Name, 1, pma, extra, sum))
	}
	for _, t := range st.Tenants {
		mt := Tenant{Name: t.Name, Processes: t.Clients, RateHeld: t.Held, Held: []Counter{
			{"qps", t.QPs}, {"cqs", t.CQs}, {"mrs", t.MRs}, {"mr_bytes", t.MRBytes}}}
		for _, q := range []Counter{{"max_clients", t.MaxClients}, {"max_qps", t.MaxQPs}, {"max_cqs", t.MaxCQs}, {"max_mrs", t.MaxMRs},
			{"max_memory", t.MaxMemory}, {"rate", t.Rate}} {
			if q.Value > 0 {
				mt.Quotas = append(mt.Quotas, q)
			}
		}
		s.Tenants = append(s.Tenants, mt)
	}
	return s
}

// Daemon asks the daemon serving socket ("": IBEX_DAEMON_SOCKET or
// /run/ibex/ibexd.sock) for its status (as `ibex daemon status` does) and
// maps it (FromStatus). The query takes at most ctx's deadline, 5 s
// without one.
func Daemon(ctx context.Context, socket string) (Snapshot, error) {
	if socket == "" {
		socket = ibexd.SocketPath()
	}
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	timeout := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	st, err := ibexd.QueryStatus(socket, timeout)
	if err != nil {
		return Snapshot{}, fmt.Errorf("metrics: no daemon answers on %s (is `ibex daemon` running?): %w", socket, err)
	}
	if st.Socket == "" {
		st.Socket = socket
	}
	return FromStatus(*st), nil
}
