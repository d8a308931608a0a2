package packet

import (
	"fmt"

	"github.com/ibex-rdma/ibex/sim/des"
)

// Routing is how switches choose among a destination's eligible ports.
type Routing uint8

const (
	RouteDModK    Routing = iota // OpenSM ftree's destination-mod-k (static)
	RouteECMP                    // hash of the QP's flow (static per QP)
	RouteAdaptive                // least queued bytes at the moment a packet passes
)

var routingNames = [...]string{"dmodk", "ecmp", "adaptive"}

func (r Routing) String() string {
	if int(r) < len(routingNames) {
		return routingNames[r]
	}
	return fmt.Sprintf("routing(%d)", uint8(r))
}

// ParseRouting is the inverse of String.
func ParseRouting(s string) (Routing, error) {
	for i, n := range routingNames {
		if s == n {
			return Routing(i), nil
		}
	}
	return 0, fmt.Errorf("routing %q: want dmodk, ecmp or adaptive", s)
}

// Params are the link, switch, NIC and transport constants of a run. The
// topology graph gives rates, cable lengths, MTU and switch latency;
// everything else is here. Zero fields take the defaults of Defaults, whose
// comments give where each value comes from.
type Params struct {
	// Link layer.
	VLs        int     // data virtual lanes in use, 1 to 8; QP i sends on VL i mod VLs
	CreditUnit int     // bytes per flow-control credit
	Buffer     int     // receive buffer per input port per VL, bytes (the credits a port advertises)
	PropNsPerM float64 // propagation delay per metre of cable
	// VLWeights are the VL arbitration weights (packets a VL may send in
	// its turn before the next VL with traffic gets its turn); nil: 1 each.
	VLWeights []int

	// Packet overheads on the wire, bytes.
	HeaderBytes int // every packet: LRH 8 + BTH 12 + ICRC 4 + VCRC 2
	FirstBytes  int // the first packet of an RDMA WRITE message: RETH 16

	// NIC and transport.
	MsgOverhead des.Time // per message, serialised per QP: the gap between a QP's messages
	NICLatency  des.Time // wire to memory at the receiver, and memory to wire at the sender
	Chunk       int      // bytes per message (NCCL Simple: NCCL_BUFFSIZE / NCCL_STEPS)
	Slots       int      // messages in flight per connection (NCCL_STEPS)
	QPsPerConn  int      // QPs per connection; a connection's messages go round-robin over them
	// RetryTimeout is how long a QP waits for an acknowledgement before it
	// resends (the IBA local ACK timeout, 4.096 µs × 2^timeout). Only
	// packets stranded by a link failure need it: nothing else is lost.
	RetryTimeout des.Time

	// Inside a host: GPU to GPU over NVLink, per GPU and direction.
	NVLinkRate    float64  // bytes/s
	NVLinkLatency des.Time // one way

	Routing Routing
}

// Defaults are the values a zero Params field takes.
var Defaults = Params{
	// IBA 1.x §7.6: up to 15 data VLs; one is what a single traffic class uses.
	VLs: 1,
	// IBA §7.9.4: flow-control blocks of 64 bytes.
	CreditUnit: 64,
	// 64 KiB per VL per port. Line rate needs BW × RTT + MTU: at 400 Gb/s
	// with 30 m leaf-spine cables and 250 ns switches about 45 KB
	// (fabric-sim.md §3.3). Quantum-2's buffer split per port is not public.
	Buffer: 64 << 10,
	// NVIDIA LinkX documents 4.5 ns/m (fibre and copper, informative);
	// silica fibre is about 4.9 ns/m. 5 is the usual round figure.
	PropNsPerM: 5,
	// IBA §5.2/§9.2: LRH 8, BTH 12, ICRC 4, VCRC 2 bytes on every packet of
	// an RC connection within a subnet (no GRH); RETH 16 on the first
	// packet of an RDMA WRITE.
	HeaderBytes: 26,
	FirstBytes:  16,
	// Estimate for ConnectX-7 plus the NCCL proxy: fetching the WQE over
	// PCIe and starting the DMA read of the data (~0.5 µs, a PCIe Gen5
	// round trip and a doorbell), serialised per QP.
	MsgOverhead: 500 * des.Nanosecond,
	// ConnectX-class NIC latency, ~0.6 µs per one-way transfer split
	// between sender and receiver (fabric-sim.md §3.2, commonly quoted).
	NICLatency: 300 * des.Nanosecond,
	// NCCL 2.x Simple protocol: NCCL_BUFFSIZE 4 MiB in NCCL_STEPS = 8
	// steps of 512 KiB, one RDMA WRITE per step, 8 in flight.
	Chunk:      512 << 10,
	Slots:      8,
	QPsPerConn: 1,
	// NCCL_IB_TIMEOUT = 20: 4.096 µs × 2^20 = 4.29 s, NCCL's default in
	// recent releases as far as we know (older ones used 18, 1.07 s).
	RetryTimeout: 4096 * des.Nanosecond << 20,
	// H100 NVLink 4: 18 links, 450 GB/s per direction; NCCL reaches
	// ~370 GB/s busbw in one node (fabric-sim.md §2.1): use the achieved rate.
	NVLinkRate:    370e9,
	NVLinkLatency: 1 * des.Microsecond,
	Routing:       RouteDModK,
}

// withDefaults fills zero fields and checks the rest, naming the first
// bad one.
func (p Params) withDefaults() (Params, error) {
	d := Defaults
	if p.VLs == 0 {
		p.VLs = d.VLs
	}
	if p.CreditUnit == 0 {
		p.CreditUnit = d.CreditUnit
	}
	if p.Buffer == 0 {
		p.Buffer = d.Buffer
	}
	if p.PropNsPerM == 0 {
		p.PropNsPerM = d.PropNsPerM
	}
	if p.HeaderBytes == 0 {
		p.HeaderBytes = d.HeaderBytes
	}
	if p.FirstBytes == 0 {
		p.FirstBytes = d.FirstBytes
	}
	if p.MsgOverhead == 0 {
		p.MsgOverhead = d.MsgOverhead
	}
	if p.NICLatency == 0 {
		p.NICLatency = d.NICLatency
	}
	if p.Chunk == 0 {
		p.Chunk = d.Chunk
	}
	if p.Slots == 0 {
		p.Slots = d.Slots
	}
	if p.QPsPerConn == 0 {
		p.QPsPerConn = d.QPsPerConn
	}
	if p.RetryTimeout == 0 {
		p.RetryTimeout = d.RetryTimeout
	}
	if p.NVLinkRate == 0 {
		p.NVLinkRate = d.NVLinkRate
	}
	if p.NVLinkLatency == 0 {
		p.NVLinkLatency = d.NVLinkLatency
	}
	bad := func(format string, args ...any) (Params, error) {
		return p, fmt.Errorf("packet: %w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case p.VLs < 1 || p.VLs > 8:
		return bad("VLs %d: want 1 to 8", p.VLs)
	case p.CreditUnit < 1 || p.CreditUnit > 4096:
		return bad("credit unit %d bytes: want 1 to 4096", p.CreditUnit)
	case !(p.PropNsPerM >= 0 && p.PropNsPerM <= 1e6):
		return bad("propagation %g ns/m: want 0 to 1e6", p.PropNsPerM)
	case p.Buffer < 1 || p.Buffer > 1<<30:
		return bad("buffer %d bytes per VL: want 1 B to 1 GiB", p.Buffer)
	case p.RetryTimeout < 0:
		return bad("retry timeout %v: want >= 0", p.RetryTimeout)
	case p.HeaderBytes < 0 || p.FirstBytes < 0:
		return bad("header bytes %d, first-packet bytes %d: want >= 0", p.HeaderBytes, p.FirstBytes)
	case p.MsgOverhead < 0 || p.NICLatency < 0 || p.NVLinkLatency < 0:
		return bad("message overhead %v, NIC latency %v, NVLink latency %v: want >= 0", p.MsgOverhead, p.NICLatency, p.NVLinkLatency)
	case p.Chunk < 1 || p.Chunk > 1<<30:
		return bad("chunk %d bytes: want 1 B to 1 GiB", p.Chunk)
	case p.Slots < 1 || p.Slots > 1024:
		return bad("slots %d: want 1 to 1024", p.Slots)
	case p.QPsPerConn < 1 || p.QPsPerConn > 64:
		return bad("QPs per connection %d: want 1 to 64", p.QPsPerConn)
	case !(p.NVLinkRate > 0 && p.NVLinkRate <= 1e15):
		return bad("NVLink rate %g B/s: want > 0 and <= 1e15", p.NVLinkRate)
	case p.Routing > RouteAdaptive:
		return bad("%v: want dmodk, ecmp or adaptive", p.Routing)
	case p.VLWeights != nil && len(p.VLWeights) != p.VLs:
		return bad("%d VL weights for %d VLs", len(p.VLWeights), p.VLs)
	}
	for i, w := range p.VLWeights {
		if w < 1 || w > 255 {
			return bad("VL %d weight %d: want 1 to 255", i, w)
		}
	}
	return p, nil
}

// CheckParams fills p's zero fields with Defaults and checks the rest, as
// Run does; other engines (sim/flow) use it to read the same parameters.
func CheckParams(p Params) (Params, error) { return p.withDefaults() }
