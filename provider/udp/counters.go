package udp

import (
	"sync/atomic"

	"github.com/ibex-rdma/ibex/verbs"
)

// PortCounters are a device's port counters, with the InfiniBand names
// (PortXmitData and PortRcvData count 4-byte words, as IBA 16.1.3.5 says).
type PortCounters struct {
	PortXmitData, PortRcvData uint64
	PortXmitPkts, PortRcvPkts uint64
	PortRcvErrors             uint64 // malformed packets, bad ICRCs, packets not from the QP's peer
	ICRCErrors                uint64
	UnknownQP                 uint64 // packets for a QP that is not here or not ready
	// SrcAddrErrors counts RC packets (and CNPs) for a QP of the device
	// whose source IP address is not the QP's peer (the DGID set at RTR):
	// dropped, as rxe's check_addr drops them. PortRcvErrors counts them
	// too. rxe has no counter of its own for them; this is ibex's.
	SrcAddrErrors uint64
	// PKeyViolations counts packets for a QP of the device whose BTH
	// P_Key does not match the QP's (another partition, or both limited
	// members): dropped. The name is PortInfo's P_KeyViolations, the
	// counter IBA 10.9.3 has a channel adapter keep; package metrics
	// also gives it as PortRcvConstraintErrors, which IBA defines for a
	// switch port's inbound partition enforcement, the same check.
	PKeyViolations   uint64
	PortXmitDiscards uint64 // datagrams the socket refused
	// PortXmitWait counts the times a transmit found no room and waited
	// for it: a UDP socket's send buffer full (EAGAIN), an AF_XDP socket
	// without a free TX chunk. IBA counts ticks without link credits; a
	// socket has no credits, its full buffer is the back-pressure.
	PortXmitWait uint64

	// Encryption (package psp): sealed packets dropped because their tag
	// did not authenticate (altered, forged, wrong key), their IV was seen
	// or too old (replay), their SPI names no SA of the QP (or the QP
	// does not encrypt); and plaintext packets dropped because their QP
	// is encrypted. All are in PortRcvErrors too.
	PSPAuthErrors, PSPReplayDrops, PSPUnknownSPI, PSPPlaintextDrops uint64
}

type counters struct {
	xmitData, rcvData, xmitPkts, rcvPkts, rcvErrors, icrcErrors, unknownQP, xmitDiscards atomic.Uint64
	xmitWait                                                                             atomic.Uint64 // only where a transmit waits
	srcAddrErrors, pkeyViolations                                                        atomic.Uint64
	pspAuth, pspReplay, pspUnknownSPI, pspPlain                                          atomic.Uint64 // encryption's drops (psp.go)

	// Not port counters: how the datagrams crossed the socket (the
	// batchConn counts the messages sent and the system calls).
	xmitMsgs, xmitSuper atomic.Uint64 // messages sent; of them GSO super-datagrams
	rcvMsgs, rcvSuper   atomic.Uint64 // messages received; of them GRO super-datagrams
	syscalls            atomic.Uint64 // sendmmsg and recvmmsg calls

	// Who received (loop.go): messages received in a pass run by a
	// goroutine that polled or posted (run to completion), and by the
	// device's progress goroutine; wake-ups of that goroutine asleep in
	// Recv by a post or a poll that found the device held (hand-offs).
	inlineRcv, loopRcv, handoffs atomic.Uint64
}

func (d *device) counters() PortCounters {
	c := &d.ctrs
	return PortCounters{
		PortXmitData: c.xmitData.Load() / 4, PortRcvData: c.rcvData.Load() / 4,
		PortXmitPkts: c.xmitPkts.Load(), PortRcvPkts: c.rcvPkts.Load(), PortRcvErrors: c.rcvErrors.Load(),
		ICRCErrors: c.icrcErrors.Load(), UnknownQP: c.unknownQP.Load(), PortXmitDiscards: c.xmitDiscards.Load(),
		PortXmitWait: c.xmitWait.Load(), SrcAddrErrors: c.srcAddrErrors.Load(),
		PKeyViolations: c.pkeyViolations.Load(),
		PSPAuthErrors:  c.pspAuth.Load(), PSPReplayDrops: c.pspReplay.Load(), PSPUnknownSPI: c.pspUnknownSPI.Load(),
		PSPPlaintextDrops: c.pspPlain.Load(),
	}
}

// Counters returns the port counters of a running device (false if the
// device is not open).
func Counters(device string) (PortCounters, bool) {
	prov.mu.Lock()
	d := prov.live[device]
	prov.mu.Unlock()
	if d == nil {
		return PortCounters{}, false
	}
	return d.counters(), true
}

// PortCounters implements verbs.PortCounterReader.
func (drv *opened) PortCounters(port uint8) []verbs.PortCounter {
	c := drv.dev.counters()
	return []verbs.PortCounter{
		{Name: "PortXmitData", Value: c.PortXmitData}, {Name: "PortRcvData", Value: c.PortRcvData},
		{Name: "PortXmitPkts", Value: c.PortXmitPkts}, {Name: "PortRcvPkts", Value: c.PortRcvPkts},
		{Name: "PortRcvErrors", Value: c.PortRcvErrors}, {Name: "PortXmitDiscards", Value: c.PortXmitDiscards},
		{Name: "PortXmitWait", Value: c.PortXmitWait},
		{Name: "ICRCErrors", Value: c.ICRCErrors}, {Name: "UnknownQP", Value: c.UnknownQP},
		{Name: "SrcAddrErrors", Value: c.SrcAddrErrors}, {Name: "PKeyViolations", Value: c.PKeyViolations},
		{Name: "PSPAuthErrors", Value: c.PSPAuthErrors}, {Name: "PSPReplayDrops", Value: c.PSPReplayDrops},
		{Name: "PSPUnknownSPI", Value: c.PSPUnknownSPI}, {Name: "PSPPlaintextDrops", Value: c.PSPPlaintextDrops},
	}
}
