package udp

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/psp"
	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/rc/rcwire"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/wire"
)

// Encryption on the wire (package psp): a device's policy and master keys,
// each QP's SPIs and security associations, sealing on send and opening on
// receive. A QP is encrypted when its device's policy is not off and both
// ends announced an SPI (verbs.ConnInfo.SPI); it then seals every packet
// and drops every plaintext one. Policy "required" refuses the move to RTR
// of a QP whose peer announced none.

// PSPPolicy is a device's encryption policy.
type PSPPolicy uint8

const (
	PSPOff      PSPPolicy = iota // never encrypt; announce no SPI
	PSPOn                        // encrypt when the peer can, else plaintext
	PSPRequired                  // encrypt, or refuse to connect
)

func (p PSPPolicy) String() string {
	return [...]string{"off", "on", "required"}[p]
}

// ErrPSPRequired is the cause of a refused connection: the device requires
// encryption and the peer does not offer it.
var ErrPSPRequired = errors.New("encryption required")

// ParsePSPPolicy reads "off", "on" or "required" ("" is off).
func ParsePSPPolicy(s string) (PSPPolicy, error) {
	switch strings.ToLower(s) {
	case "", "off":
		return PSPOff, nil
	case "on":
		return PSPOn, nil
	case "required":
		return PSPRequired, nil
	}
	return PSPOff, fmt.Errorf("udp: psp policy %q is not off, on or required", s)
}

type pspSetting struct{ policy, keyFile string }

var pspConf = struct {
	sync.Mutex
	m map[string]pspSetting
}{m: map[string]pspSetting{}}

// SetPSP configures device name's encryption before it is first opened:
// policy "off", "on" or "required" ("" follows IBEX_PSP), keyFile the
// master key file (psp.ParseKeys's format; "" follows IBEX_PSP_KEY). ibexd
// configures the devices it owns with it.
func SetPSP(name, policy, keyFile string) error {
	if _, err := ParsePSPPolicy(policy); err != nil {
		return fmt.Errorf("udp: set psp %s: %w", name, err)
	}
	pspConf.Lock()
	defer pspConf.Unlock()
	pspConf.m[name] = pspSetting{policy, keyFile}
	return nil
}

// devicePSP is a device's encryption, fixed when it starts.
type devicePSP struct {
	policy PSPPolicy
	keys   *psp.Keys
	after  uint64 // IBEX_PSP_ROTATE: rotate each sender after that many packets (0: never)
}

// loadPSP reads device name's setting (SetPSP, else IBEX_PSP,
// IBEX_PSP_KEY and IBEX_PSP_ROTATE) and its key file.
func loadPSP(name string) (devicePSP, error) {
	pspConf.Lock()
	s := pspConf.m[name]
	pspConf.Unlock()
	if s.policy == "" {
		s.policy = os.Getenv("IBEX_PSP")
	}
	if s.keyFile == "" {
		s.keyFile = os.Getenv("IBEX_PSP_KEY")
	}
	var c devicePSP
	var err error
	if c.policy, err = ParsePSPPolicy(s.policy); err != nil || c.policy == PSPOff {
		return c, err
	}
	if s.keyFile == "" {
		return c, fmt.Errorf("udp: psp policy %v needs a master key file (IBEX_PSP_KEY)", c.policy)
	}
	if c.keys, err = psp.LoadKeys(s.keyFile); err != nil {
		return c, err
	}
	if v := os.Getenv("IBEX_PSP_ROTATE"); v != "" {
		if c.after, err = strconv.ParseUint(v, 10, 64); err != nil {
			return c, fmt.Errorf("udp: IBEX_PSP_ROTATE=%q: not a packet count", v)
		}
	}
	return c, nil
}

// initPSP gives a new QP its receive SPI.
func (q *qpDriver) initPSP() {
	if d := q.dev; d.psp.policy != PSPOff {
		q.recvSPI = d.psp.keys.NewSPI()
		d.pspQPs.Store(q.qp.Num(), q)
	}
}

// RecvSPI is driver.Securer: the SPI this QP receives under.
func (q *qpDriver) RecvSPI() uint32 { return q.recvSPI }

// PeerSPI is driver.Securer: the peer's SPI, kept for RTR.
func (q *qpDriver) PeerSPI(spi uint32) error {
	d := q.dev
	if d.psp.policy == PSPOff {
		return nil
	}
	if spi != 0 {
		if _, err := d.psp.keys.Derive(spi, psp.Flow{}); err != nil {
			return fmt.Errorf("udp: %s: %w", d.name, err)
		}
	}
	q.peerSPI.Store(spi)
	return nil
}

// Modified is driver.ModifyNotifier: policy "required" refuses RTR to a
// peer that does not encrypt.
func (q *qpDriver) Modified(from, to verbs.QPState, attr *verbs.QPAttr, mask verbs.AttrMask) error {
	d := q.dev
	if to != verbs.QPSRTR || from == verbs.QPSRTR || d.psp.policy != PSPRequired || q.peerSPI.Load() != 0 {
		return nil
	}
	return fmt.Errorf("udp: %s: %w (policy %v, IBEX_PSP) and the peer, qp %#x at %v, does not encrypt (no SPI in its connection info)",
		d.name, ErrPSPRequired, d.psp.policy, attr.DestQPN, peerAddr(attr.AH.DGID))
}

func peerAddr(g verbs.GID) string { return netip.AddrFrom16(g).Unmap().String() }

// setupPSP builds the QP's security associations at RTR: encrypted when
// both ends announced an SPI.
//
// A QP's receive SPI is fixed for its life, so a QP reconnected after
// RESET to the same peer QP has the same keys: its SAs then go on from
// where the last connection's stopped (the receiver refuses every IV it
// accepted or left behind, the sender continues after its last IV), as
// across a takeover. A fresh window would take the last connection's
// packets, replayed, once more (and the QP's PSNs start where they did);
// a fresh random IV could fall below the window of a peer that was not
// reset, which would refuse everything.
func (q *qpDriver) setupPSP(d *device, a verbs.QPAttr) error {
	oldTx, oldRx := q.tx, q.rx
	q.tx, q.rx = nil, nil
	peer := q.peerSPI.Load()
	if q.recvSPI == 0 || peer == 0 {
		return nil
	}
	local, remote := [16]byte(d.gid), [16]byte(a.AH.DGID)
	rf := psp.Flow{SrcGID: remote, DstGID: local, SrcQPN: a.DestQPN, DstQPN: q.qp.Num()}
	sf := psp.Flow{SrcGID: local, DstGID: remote, SrcQPN: q.qp.Num(), DstQPN: a.DestQPN}
	st := q.resume // a QP another process froze (RestorePSP)
	q.resume = nil
	if st == nil && oldTx != nil && oldRx != nil && q.rxFlow == rf && q.txBase == peer {
		var last PSPState
		last.RecvSPI, last.RecvTop = oldRx.State()
		last.SendSPI, last.SendIV = oldTx.State()
		st = &last
	}
	var rx *psp.Receiver
	var tx *psp.Sender
	var err error
	if st != nil {
		if rx, err = psp.ResumeReceiver(d.psp.keys, st.RecvSPI, rf, st.RecvTop); err == nil {
			tx, err = psp.ResumeSender(d.psp.keys, st.SendSPI, sf, st.SendIV)
		}
	} else if rx, err = psp.NewReceiver(d.psp.keys, q.recvSPI, rf); err == nil {
		tx, err = psp.NewSender(d.psp.keys, peer, sf)
	}
	if err != nil {
		return err
	}
	tx.RotateAfter = d.psp.after
	q.tx, q.rx, q.rxFlow, q.txBase = tx, rx, rf, peer
	return nil
}

// sealOff is where the BTH of q's packets starts in a transmit buffer
// whose plain packet would start at 0: room for the security header.
func (q *qpDriver) sealOff() int {
	if q.tx != nil {
		return psp.HeaderLen
	}
	return 0
}

// seal encodes p for q's peer in buf and seals it: the plain packet goes
// at buf[HeaderLen:] (with no ICRC computed), its BTH moves to the front
// and the security header takes its place.
func (q *qpDriver) seal(p *rc.Packet, wp *wire.Packet, buf []byte) ([]byte, error) {
	const off = psp.HeaderLen
	rcwire.ToWire(p, q.destQPN, wp)
	body, err := wire.AppendIBNoICRC(buf[off:off], wp)
	if err != nil {
		return buf, err
	}
	n := off + len(body) - ib.ICRCLen
	pkt := buf[:n:cap(buf)]
	copy(pkt[:ib.BTHLen], pkt[off:off+ib.BTHLen])
	if q.rotate.Load() && q.rotate.CompareAndSwap(true, false) {
		if err := q.tx.Rotate(); err != nil {
			return buf, err
		}
	}
	return q.tx.Seal(pkt)
}

// receiveSealed opens a sealed datagram (TVer 1) and hands its plain
// packet to the QP's engine. A datagram that fails is counted and
// dropped before any engine sees it.
//
// The source check (recv.go's) comes before the tag's: a datagram from
// another address than the QP's peer costs no AES-GCM.
func (d *device) receiveSealed(now int64, b []byte, src netip.AddrPort, ce bool, pkt *rc.Packet, wp *wire.Packet) {
	if len(b) < psp.MinLen || len(b)%4 != 0 || !ib.Opcode(b[0]).Valid() {
		d.ctrs.rcvErrors.Add(1)
		return
	}
	qpn := uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7])
	q := d.qps[qpn]
	if q == nil || q.eng == nil || q.dropAfter || q.halted.Load() {
		d.ctrs.unknownQP.Add(1)
		return
	}
	if src.Addr().Unmap() != q.peer.Addr() {
		d.ctrs.srcAddrErrors.Add(1)
		d.ctrs.rcvErrors.Add(1)
		return
	}
	if q.rx == nil {
		d.ctrs.pspUnknownSPI.Add(1) // the QP is not encrypted
		d.ctrs.rcvErrors.Add(1)
		return
	}
	pt, err := q.rx.Open(b)
	if err != nil {
		switch err {
		case psp.ErrAuth:
			d.ctrs.pspAuth.Add(1)
		case psp.ErrReplay:
			d.ctrs.pspReplay.Add(1)
		case psp.ErrUnknownSPI:
			d.ctrs.pspUnknownSPI.Add(1)
		}
		d.ctrs.rcvErrors.Add(1)
		return
	}
	// The plain packet: the BTH (TVer 0 again) where the security header
	// was, the plaintext, and four bytes of the tag where DecodeIB reads
	// an ICRC it does not check.
	const off = psp.HeaderLen
	copy(b[off:off+ib.BTHLen], b[:ib.BTHLen])
	b[off+1] &^= 0x0f
	if err := wire.DecodeIB(b[off:off+ib.BTHLen+len(pt)+ib.ICRCLen], wp); err != nil {
		d.ctrs.rcvErrors.Add(1)
		return
	}
	if wp.BTH.Opcode.Transport() != ib.RC && wp.BTH.Opcode != ib.CNP {
		d.ctrs.unknownQP.Add(1)
		return
	}
	d.toEngine(now, q, ce, pkt, wp)
}

// RotatePSP moves QP qpn of device name to its peer's successor SPI
// (psp.Sender.Rotate) at its next packet; the peer follows with no packet
// lost. It fails if the device or QP is unknown or does not encrypt.
func RotatePSP(name string, qpn uint32) error {
	prov.mu.Lock()
	d := prov.live[name]
	prov.mu.Unlock()
	if d == nil {
		return fmt.Errorf("udp: rotate psp: device %s not open", name)
	}
	v, ok := d.pspQPs.Load(qpn)
	if !ok {
		return fmt.Errorf("udp: rotate psp: %s has no encrypting qp %#x", name, qpn)
	}
	v.(*qpDriver).rotate.Store(true)
	return nil
}

// PSPState is an encrypted QP's security state, carried to another
// process by a takeover (ibexd's upgrade): the SPI it receives under now
// and the highest IV it accepted, the SPI it sends under now and its last
// IV.
type PSPState struct {
	RecvSPI uint32 `json:"recv_spi"`
	RecvTop uint64 `json:"recv_top"`
	SendSPI uint32 `json:"send_spi"`
	SendIV  uint64 `json:"send_iv"`
}

// freezePSP records the SAs of the device's encrypted QPs (Freeze).
func (d *device) freezePSP() {
	d.frozenPSP = map[uint32]PSPState{}
	for n, q := range d.qps {
		if q.tx == nil || q.rx == nil {
			continue
		}
		var st PSPState
		st.RecvSPI, st.RecvTop = q.rx.State()
		st.SendSPI, st.SendIV = q.tx.State()
		d.frozenPSP[n] = st
	}
}

// FrozenPSP returns the security state of the encrypted QPs of device
// name, by QP number, as Freeze left them.
func FrozenPSP(name string) map[uint32]PSPState {
	prov.mu.Lock()
	d := prov.live[name]
	prov.mu.Unlock()
	if d == nil {
		return nil
	}
	return d.frozenPSP
}

// RestorePSP makes qp, a new QP of an encrypting device not yet in RTR,
// go on with st (FrozenPSP's, from another process): at RTR it receives
// and sends under st's SAs instead of new ones. Call it before the move
// to RTR.
func RestorePSP(qp *verbs.QP, st PSPState) error {
	prov.mu.Lock()
	d := prov.live[qp.Context().Name()]
	prov.mu.Unlock()
	if d == nil {
		return fmt.Errorf("udp: restore psp of qp %#x: device %s not open", qp.Num(), qp.Context().Name())
	}
	v, ok := d.pspQPs.Load(qp.Num())
	if !ok {
		return fmt.Errorf("udp: restore psp of qp %#x: %s does not encrypt (psp policy off)", qp.Num(), d.name)
	}
	q := v.(*qpDriver)
	q.recvSPI = st.RecvSPI
	q.peerSPI.Store(st.SendSPI)
	q.resume = &st
	return nil
}
