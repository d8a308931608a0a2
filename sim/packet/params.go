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

// LinkLayer is the fabric's link layer: InfiniBand's credit flow control,
// or RoCEv2 over Ethernet with PFC.
type LinkLayer uint8

const (
	LinkIB   LinkLayer = iota // InfiniBand: per-VL credits, lossless by construction
	LinkRoCE                  // RoCEv2: Ethernet framing, PFC per priority, ECN and DCQCN
)

var linkLayerNames = [...]string{"ib", "roce"}

func (l LinkLayer) String() string {
	if int(l) < len(linkLayerNames) {
		return linkLayerNames[l]
	}
	return fmt.Sprintf("linklayer(%d)", uint8(l))
}

// ParseLinkLayer is the inverse of String.
func ParseLinkLayer(s string) (LinkLayer, error) {
	for i, n := range linkLayerNames {
		if s == n {
			return LinkLayer(i), nil
		}
	}
	return 0, fmt.Errorf("link layer %q: want ib or roce", s)
}

// CongestionControl is what a sending QP does about congestion beyond the
// link layer's flow control and NCCL's per-connection slots (which every
// mode keeps).
type CongestionControl uint8

const (
	CCAuto  CongestionControl = iota // DCQCN with RoCE, none with InfiniBand
	CCNone                           // none: with RoCE, PFC and NCCL's receiver-driven admission only (Meta's choice)
	CCDCQCN                          // DCQCN (RoCE only): ECN-marked packets make the receiver send CNPs, which cut the QP's rate
)

var ccNames = [...]string{"auto", "none", "dcqcn"}

func (c CongestionControl) String() string {
	if int(c) < len(ccNames) {
		return ccNames[c]
	}
	return fmt.Sprintf("cc(%d)", uint8(c))
}

// ParseCongestionControl is the inverse of String.
func ParseCongestionControl(s string) (CongestionControl, error) {
	for i, n := range ccNames {
		if s == n {
			return CongestionControl(i), nil
		}
	}
	return 0, fmt.Errorf("congestion control %q: want auto, none or dcqcn", s)
}

// DCQCN are the constants of DCQCN (Zhu et al., "Congestion Control for
// Large-Scale RDMA Deployments", SIGCOMM 2015): the sending QP's reaction
// point (RP) and the receiving NIC's notification point (NP). Zero fields
// take Defaults.DCQCN's values.
type DCQCN struct {
	G           float64  // g: gain of the congestion estimate α
	AlphaTimer  des.Time // K: α decays, α = (1-g)α, every K without a CNP
	RateTimer   des.Time // T: a rate-increase stage every T without a CNP
	ByteCounter int64    // B: and one every B bytes the QP sends
	FastStages  int      // F: stages of fast recovery (Rc = (Rt+Rc)/2) before additive increase
	RateAI      float64  // R_AI, bits/s (>= 1 Mb/s): additive increase of the target rate per stage
	RateHAI     float64  // R_HAI, bits/s: hyper increase per stage, once both counters are past F
	MinRate     float64  // bits/s: no cut goes below
	CNPInterval des.Time // N: the NP sends a QP at most one CNP per N
}

// Params are the link, switch, NIC and transport constants of a run. The
// topology graph gives rates, cable lengths, MTU and switch latency;
// everything else is here. Zero fields take the defaults of Defaults, whose
// comments give where each value comes from.
type Params struct {
	// LinkLayer is InfiniBand (the default) or RoCEv2. With RoCE, VLs are
	// the PFC priorities (traffic classes: QP i on priority i mod VLs,
	// VLWeights the ETS weights in packets), Buffer and CreditUnit are
	// unused, the PFC, ECN and DCQCN fields below apply, and Routing may
	// not be adaptive (the receivers are go-back-N).
	LinkLayer LinkLayer

	// Link layer.
	VLs        int     // data virtual lanes in use, 1 to 8; QP i sends on VL i mod VLs
	CreditUnit int     // bytes per flow-control credit
	Buffer     int     // receive buffer per input port per VL, bytes (the credits a port advertises)
	PropNsPerM float64 // propagation delay per metre of cable
	// VLWeights are the VL arbitration weights (packets a VL may send in
	// its turn before the next VL with traffic gets its turn); nil: 1 each.
	VLWeights []int

	// Packet overheads on the wire, bytes.
	HeaderBytes int // every packet: LRH 8 + BTH 12 + ICRC 4 + VCRC 2 (RoCE: RoCEHeaderBytes)
	FirstBytes  int // the first packet of an RDMA WRITE message: RETH 16

	// RoCE: PFC (IEEE 802.1Qbb) per switch ingress port and priority. The
	// port's buffer for a priority is PFCXoff + PFCHeadroom bytes: above
	// Xoff it sends PAUSE to the port upstream, at Xon = Xoff -
	// PFCHysteresis or below it sends RESUME, and a packet that arrives
	// to a full buffer is dropped. PFCHeadroom 0 gives every port what
	// can still arrive once it crosses Xoff, so that nothing is dropped:
	// 3 max frames + VLs × 84-byte PFC frames + rate × (2 × cable delay +
	// switch latency), rounded up (roce.go says why).
	PFCXoff       int
	PFCHysteresis int
	PFCHeadroom   int

	// RoCE: ECN marking at switch egress, as a packet leaves its output
	// queue, RED-like on the bytes still queued there for its priority:
	// never at Kmin or below, probability rising linearly to ECNPmax at
	// ECNKmax, always above. The draws come from the run's seeded source.
	ECNKmin, ECNKmax int
	ECNPmax          float64

	// CC is the sending QPs' congestion control: with RoCE DCQCN by
	// default, or none (PFC and NCCL's admission alone; switches still
	// mark, and the marks are counted, but nobody reacts).
	CC    CongestionControl
	DCQCN DCQCN

	// NIC and transport.
	MsgOverhead des.Time // per message, serialised per QP: the gap between a QP's messages
	NICLatency  des.Time // wire to memory at the receiver, and memory to wire at the sender
	Chunk       int      // bytes per message (NCCL Simple: NCCL_BUFFSIZE / NCCL_STEPS)
	Slots       int      // messages in flight per connection (NCCL_STEPS)
	QPsPerConn  int      // QPs per connection; a connection's messages go round-robin over them
	// RetryTimeout is how long a QP waits for an acknowledgement before it
	// resends (the IBA local ACK timeout, 4.096 µs × 2^timeout). With
	// InfiniBand only packets stranded by a link failure need it. With
	// RoCE a loss is normally repaired sooner, by go-back-N on the
	// receiver's NAK; the timeout is for a loss no later packet reveals.
	RetryTimeout des.Time

	// Inside a host: GPU to GPU over NVLink, per GPU and direction.
	NVLinkRate    float64  // bytes/s
	NVLinkLatency des.Time // one way

	Routing Routing
}

// RoCEHeaderBytes is the wire overhead of every RoCEv2 packet, the
// default HeaderBytes with RoCE: Ethernet header 14 + IPv4 20 + UDP 8 +
// BTH 12 + ICRC 4 + FCS 4, plus the preamble and start delimiter 8 and the
// minimum inter-frame gap 12 that every frame costs on the wire (IEEE
// 802.3; IBA Annex A17 for RoCEv2).
const RoCEHeaderBytes = 14 + 20 + 8 + 12 + 4 + 4 + 8 + 12

// pauseWire is a PFC frame on the wire: the minimum Ethernet frame (64
// bytes with FCS) plus preamble, delimiter and inter-frame gap.
const pauseWire = 64 + 8 + 12

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

	// RoCE. Ethernet switches share one buffer among their ports with
	// dynamic per-queue limits; the engine has a static one per ingress
	// port and priority. 256 KiB is our stand-in: ~5 µs of 400 Gb/s, a
	// small share of a 400G/800G switch's tens of MB (Spectrum-4: 160 MB
	// for 64 × 800G), so that PFC acts under incast, as it does in
	// practice (fabric-sim.md §5.3).
	PFCXoff: 256 << 10,
	// Xon two full 4 KiB frames below Xoff: a few frames of hysteresis so
	// that a PAUSE is not followed by a RESUME after every packet
	// (switches default to a few cells to a few KB).
	PFCHysteresis: 8 << 10,
	// 0: per port, from its cable and rate, lossless (see PFCHeadroom).
	PFCHeadroom: 0,
	// ECN: DCQCN's paper used Kmin 5 KB, Kmax 200 KB, Pmax 1% at 40 Gb/s;
	// HPCC's DCQCN runs 4 and 16 KB per Gb/s with Pmax 20%. Here Kmax is
	// the per-ingress Xoff, so that marking starts well before PFC
	// ("ECN before PFC": Guo et al., RDMA over Commodity Ethernet at
	// Scale, SIGCOMM 2016), Kmin a quarter of it, Pmax HPCC's 20%.
	ECNKmin: 64 << 10,
	ECNKmax: 256 << 10,
	ECNPmax: 0.2,
	CC:      CCAuto,
	DCQCN: DCQCN{
		// The paper's g, K, T, B, F and N (Zhu et al. 2015, §5 and Table
		// 1). ConnectX firmware differs: α updated every 1 µs with g ≈
		// 5/1024 (dce_tcp_g 1019), rpg_time_reset 300 µs, rpg_byte_reset
		// 32767 B, rpg_threshold 1, min_time_between_cnps 4 µs.
		G:           1.0 / 256,
		AlphaTimer:  55 * des.Microsecond,
		RateTimer:   55 * des.Microsecond,
		ByteCounter: 10 << 20,
		FastStages:  5,
		CNPInterval: 50 * des.Microsecond,
		// The paper's R_AI is 40 Mb/s at 40 Gb/s: 0.1% of the line rate,
		// scaled here to 400 Gb/s; R_HAI ten times R_AI as in QCN (IEEE
		// 802.1Qau: 5 and 50 Mb/s, ConnectX's rpg_ai_rate and
		// rpg_hai_rate defaults, meant for 10-40 Gb/s).
		RateAI:  400e6,
		RateHAI: 4e9,
		// HPCC's DCQCN runs use 100 Mb/s (ConnectX: rpg_min_rate 1 Mb/s).
		MinRate: 100e6,
	},
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
		if p.LinkLayer == LinkRoCE {
			p.HeaderBytes = RoCEHeaderBytes
		}
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
	if p.PFCXoff == 0 {
		p.PFCXoff = d.PFCXoff
	}
	if p.PFCHysteresis == 0 {
		p.PFCHysteresis = d.PFCHysteresis
	}
	if p.ECNKmin == 0 {
		p.ECNKmin = d.ECNKmin
	}
	if p.ECNKmax == 0 {
		p.ECNKmax = d.ECNKmax
	}
	if p.ECNPmax == 0 {
		p.ECNPmax = d.ECNPmax
	}
	if p.CC == CCAuto {
		p.CC = CCNone
		if p.LinkLayer == LinkRoCE {
			p.CC = CCDCQCN
		}
	}
	p.DCQCN = p.DCQCN.withDefaults(d.DCQCN)
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
	switch {
	case p.LinkLayer > LinkRoCE:
		return bad("%v: want ib or roce", p.LinkLayer)
	case p.CC > CCDCQCN:
		return bad("%v: want auto, none or dcqcn", p.CC)
	case p.CC == CCDCQCN && p.LinkLayer != LinkRoCE:
		return bad("congestion control dcqcn needs link layer roce, not %v", p.LinkLayer)
	case p.LinkLayer == LinkRoCE && p.Routing == RouteAdaptive:
		// RoCE receivers here take packets in PSN order (go-back-N): every
		// packet adaptive routing lets overtake another would count as a
		// loss. NICs that place out of order (Spectrum-X) are not modelled.
		return bad("adaptive routing with link layer roce: the RoCE receivers are go-back-N and would take every overtaking for a loss; use dmodk or ecmp")
	case p.PFCXoff < 1 || p.PFCXoff > 1<<29:
		return bad("PFC Xoff %d bytes: want 1 B to 512 MiB", p.PFCXoff)
	case p.PFCHysteresis < 1 || p.PFCHysteresis > p.PFCXoff:
		return bad("PFC hysteresis %d bytes: want 1 B to Xoff (%d)", p.PFCHysteresis, p.PFCXoff)
	case p.PFCHeadroom < 0 || p.PFCHeadroom > 1<<29:
		return bad("PFC headroom %d bytes: want 0 (per port, lossless) to 512 MiB", p.PFCHeadroom)
	case p.ECNKmin < 1 || p.ECNKmax < p.ECNKmin || p.ECNKmax > 1<<30:
		return bad("ECN Kmin %d, Kmax %d bytes: want 1 <= Kmin <= Kmax <= 1 GiB", p.ECNKmin, p.ECNKmax)
	case !(p.ECNPmax > 0 && p.ECNPmax <= 1):
		return bad("ECN Pmax %g: want > 0 and <= 1", p.ECNPmax)
	}
	if err := p.DCQCN.check(); err != nil {
		return bad("%v", err)
	}
	return p, nil
}

func (c DCQCN) withDefaults(d DCQCN) DCQCN {
	if c.G == 0 {
		c.G = d.G
	}
	if c.AlphaTimer == 0 {
		c.AlphaTimer = d.AlphaTimer
	}
	if c.RateTimer == 0 {
		c.RateTimer = d.RateTimer
	}
	if c.ByteCounter == 0 {
		c.ByteCounter = d.ByteCounter
	}
	if c.FastStages == 0 {
		c.FastStages = d.FastStages
	}
	if c.RateAI == 0 {
		c.RateAI = d.RateAI
	}
	if c.RateHAI == 0 {
		c.RateHAI = d.RateHAI
	}
	if c.MinRate == 0 {
		c.MinRate = d.MinRate
	}
	if c.CNPInterval == 0 {
		c.CNPInterval = d.CNPInterval
	}
	return c
}

func (c DCQCN) check() error {
	rate := func(r float64) bool { return r > 0 && r <= 1e15 }
	switch {
	case !(c.G > 0 && c.G <= 1):
		return fmt.Errorf("DCQCN g %g: want > 0 and <= 1", c.G)
	case c.AlphaTimer < 0 || c.RateTimer < 0 || c.CNPInterval < 0:
		return fmt.Errorf("DCQCN α timer %v, rate timer %v, CNP interval %v: want > 0", c.AlphaTimer, c.RateTimer, c.CNPInterval)
	case c.ByteCounter < 0:
		return fmt.Errorf("DCQCN byte counter %d: want > 0", c.ByteCounter)
	case c.FastStages < 0 || c.FastStages > 1000:
		return fmt.Errorf("DCQCN fast-recovery stages %d: want 1 to 1000", c.FastStages)
	case !rate(c.RateAI) || !rate(c.RateHAI) || !rate(c.MinRate) || c.RateAI < 1e6:
		return fmt.Errorf("DCQCN R_AI %g, R_HAI %g, minimum rate %g b/s: want R_AI >= 1 Mb/s, all <= 1e15 b/s", c.RateAI, c.RateHAI, c.MinRate)
	}
	return nil
}

// CheckParams fills p's zero fields with Defaults and checks the rest, as
// Run does; other engines (sim/flow) use it to read the same parameters.
func CheckParams(p Params) (Params, error) { return p.withDefaults() }
