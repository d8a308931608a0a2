package fabric

import "github.com/ibex-rdma/ibex/sim/des"

// Params are the link, switch, NIC and transport constants of a run. The
// topology graph gives rates, cable lengths, MTU and switch latency;
// everything else is here. Zero fields take the defaults of Defaults, whose
// comments give where each value comes from (CheckParams fills them).
// sim/packet uses every field; sim/flow the header bytes, message size
// and overhead, NIC and NVLink figures and Routing.
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
	// switch latency), rounded up (sim/packet's roce.go says why).
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
