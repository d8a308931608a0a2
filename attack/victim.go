package attack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
)

// A victim is a separate process running ordinary RDMA traffic that the
// suite attacks. It reads commands, one JSON object a line, on its standard
// input and answers each with one Status line on its standard output. It
// tells an observer what judging an attack needs (memory checks, QP states,
// completion statuses), never its keys, QPNs or PSNs: the attacker sniffs
// those. (A server victim hands a client its own buffer's key, as a service
// does; that key is the client's, not the one under attack.)

// command is one line on a victim's standard input.
type command struct {
	Cmd string `json:"cmd"` // status, hole, quit; server: connect
	// connect: the client QP the victim connects a new QP of its own to.
	QPN  uint32 `json:"qpn,omitempty"`
	PSN  uint32 `json:"psn,omitempty"`
	Addr string `json:"addr,omitempty"`
}

// Status is a victim's answer to a command.
type Status struct {
	Err string `json:"err,omitempty"` // the command failed

	// Pair victims: the legitimate WRITE stream from A to B.
	Posted   int    `json:"posted"`             // WRITEs posted: one request packet each
	Writes   int    `json:"writes"`             // completed with success and checked
	Errors   int    `json:"errors"`             // completed with an error status
	Lost     int    `json:"lost"`               // completed with success, bytes missing at B
	Reverted int    `json:"reverted"`           // a slot later found holding an older pattern
	Canary   bool   `json:"canary"`             // B's canary half, written by nobody, changed
	StateA   string `json:"state_a,omitempty"`  // requester QP
	StateB   string `json:"state_b,omitempty"`  // responder QP
	LastErr  string `json:"last_err,omitempty"` // the first error completion or QP error
	// Hole is the status of the WRITE sent after B's QP was moved to ERR
	// ("" while it is outstanding): only a forged ACK can complete it
	// with success.
	Hole string `json:"hole,omitempty"`
	// Freed tells that B's memory changed after its MR was deregistered.
	Freed bool `json:"freed"`
	// Counted lists the drop counters of the pair's own devices and QPs
	// that are not zero, "SrcAddrErrors 3, Duplicates 16": what the victim
	// saw of an attack (ReDMArk's V7: detection).
	Counted string `json:"counted,omitempty"`

	// Server victims: the client QP just connected and the client's own
	// buffer; Secret tells that memory outside the legitimate writer's
	// slot in the secret MR changed.
	QPN    uint32 `json:"qpn,omitempty"`
	PSN    uint32 `json:"psn,omitempty"`
	RKey   uint32 `json:"rkey,omitempty"`
	VA     uint64 `json:"va,omitempty"`
	Len    uint64 `json:"len,omitempty"`
	Secret bool   `json:"secret"`

	// Daemon tenants: what a probe could not create; the keys a process
	// of the attacker's own was given.
	Failed []string `json:"failed,omitempty"`
	Keys   []uint32 `json:"keys,omitempty"`
}

const (
	slotLen  = 512
	slots    = 8
	halfLen  = slotLen * slots // B's MR: slots, then the canary half
	writeGap = 3 * time.Millisecond
)

// VictimMain runs a victim with the arguments args (without the program
// name), commands from in and answers to out, until quit or the end of in.
func VictimMain(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("victim", flag.ContinueOnError)
	mode := fs.String("mode", "pair", "pair or server")
	a := fs.String("a", "127.0.0.110", "pair: requester address; server: legitimate writer's address")
	b := fs.String("b", "127.0.0.111", "pair: responder address; server: the server's address")
	dev := fs.String("device", "", "use this device (e.g. ibexd/udp0) instead of udp devices of this process")
	pd := fs.String("pd", "separate", "server: the client QP's PD and the secret MR's: same or separate")
	pkeyIndex := fs.Uint("pkey-index", 0, "pair: the QPs' pkey_index")
	bLocal := fs.Bool("b-local", false, "pair: B on a udp device of this process at --b even with --device (a peer on another host)")
	peer := fs.String("peer", "", "intruder: the victim QP's address (default: the daemon's own)")
	spi := fs.Uint("spi", 0, "intruder: the SPI to announce for the victim QP (sniffed)")
	config := fs.String("config", "", "daemon: ibexd's configuration file")
	attachOnly := fs.Bool("attach-only", false, "hog: only attach")
	qpn := fs.Uint("qpn", 0, "intruder: the victim QP")
	psn := fs.Uint("psn", 0, "intruder: the PSN it expects")
	rkey := fs.Uint("rkey", 0, "intruder: the rkey")
	va := fs.Uint64("va", 0, "intruder: the address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var v victim
	var err error
	useAlloc = *dev != ""
	switch *mode {
	case "pair":
		v, err = newPair(*dev, *a, *b, uint16(*pkeyIndex), *bLocal)
	case "server":
		v, err = newServer(*dev, *a, *b, *pd == "same")
	case "daemon":
		v, err = newDaemonProc(*config)
	case "hog":
		v, err = newHog(*dev, *attachOnly)
	case "probe":
		v = newProbe(*dev)
	case "keys":
		v, err = newKeys(*dev)
	case "intruder":
		v = newIntruder(*dev, command{QPN: uint32(*qpn), PSN: uint32(*psn), Addr: *peer}, uint32(*rkey), *va, uint32(*spi))
	default:
		err = fmt.Errorf("victim: mode %q: want pair or server", *mode)
	}
	if err != nil {
		return err
	}
	defer v.close()
	enc := json.NewEncoder(out)
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var c command
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return fmt.Errorf("victim: command %q: %w", sc.Text(), err)
		}
		if c.Cmd == "quit" {
			return enc.Encode(v.status())
		}
		st := v.do(c)
		if err := enc.Encode(st); err != nil {
			return err
		}
	}
	return sc.Err()
}

type victim interface {
	do(command) Status
	status() Status
	close()
}

// open opens dev, or a new udp device of this process on addr.
func open(dev, name, addr string) (*verbs.Context, error) {
	if dev != "" {
		return verbs.Open(dev)
	}
	ap, err := netip.ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	if err := udp.AddDevice(name, netip.AddrPortFrom(ap, 4791)); err != nil {
		return nil, err
	}
	return verbs.Open("udp/" + name)
}

// end is one side of a connection.
type end struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	mr  *verbs.MR
	qp  *verbs.QP
}

func newEnd(ctx *verbs.Context, pd *verbs.PD, size int) (*end, error) {
	e := &end{ctx: ctx, pd: pd}
	var err error
	if e.pd == nil {
		if e.pd, err = ctx.AllocPD(); err != nil {
			return nil, err
		}
	}
	if e.cq, err = ctx.CreateCQ(64); err != nil {
		return nil, err
	}
	if size > 0 {
		if e.mr, err = regMR(e.pd, size); err != nil {
			return nil, err
		}
	}
	if e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16}}); err != nil {
		return nil, err
	}
	return e, nil
}

// useAlloc: the victim's device is a daemon's, which reaches only memory
// allocated for it; a device of this process takes Go memory, which stays
// readable after Dereg (the dereg case looks at it then).
var useAlloc bool

func regMR(pd *verbs.PD, size int) (*verbs.MR, error) {
	const access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	if useAlloc {
		return pd.AllocMR(size, access)
	}
	return pd.RegMR(make([]byte, size), access)
}

func connect(x, y *end) error { return connectWith(x, y, verbs.ConnectOptions{}) }

func connectWith(x, y *end, opt verbs.ConnectOptions) error {
	if err := x.qp.Connect(y.qp.Info(), opt); err != nil {
		return err
	}
	return y.qp.Connect(x.qp.Info(), opt)
}

// writeWait posts one signalled WRITE of src's [off, off+n) to (rkey, va)
// and waits for its completion.
func writeWait(src *end, off, n int, va uint64, rkey uint32) (verbs.WCStatus, error) {
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL:        []verbs.SGE{{Addr: src.mr.Addr() + uint64(off), Length: uint32(n), LKey: src.mr.LKey()}},
		RemoteAddr: va, RKey: rkey}}
	if err := src.qp.PostSend(wr); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	if _, err := src.cq.PollWait(ctx, wc); err != nil {
		return 0, err
	}
	return wc[0].Status, nil
}

func pattern(k int, b []byte) {
	for i := range b {
		b[i] = byte(k*31 + i*7 + 1)
	}
}

// pair is two QPs on two devices with a stream of checked WRITEs from A
// into B's first half; B's second half, the canary, nobody writes.
type pair struct {
	a, b *end
	mu   sync.Mutex
	st   Status
	last [slots]int // the pattern each slot of B last received
	stop chan struct{}
	done chan struct{}
	hole chan struct{}
	// gate is held by the stream for each WRITE and by a pause.
	gate   sync.Mutex
	paused bool
	opt    verbs.ConnectOptions
	devs   []string // the pair's own udp devices (none on a daemon's)
	freed  []byte   // dereg: B's memory after its MR was deregistered
	snap   []byte   // and what it held then
}

func newPair(dev, a, b string, pkeyIndex uint16, bLocal bool) (*pair, error) {
	ca, err := open(dev, "atvica", a)
	if err != nil {
		return nil, err
	}
	cb := ca
	p := &pair{stop: make(chan struct{}), done: make(chan struct{})}
	if dev == "" {
		p.devs = append(p.devs, "atvica")
	}
	if bLocal {
		dev = ""
	}
	if dev == "" {
		if cb, err = open(dev, "atvicb", b); err != nil {
			return nil, err
		}
		p.devs = append(p.devs, "atvicb")
	}
	if p.a, err = newEnd(ca, nil, halfLen); err != nil {
		return nil, err
	}
	if p.b, err = newEnd(cb, nil, 2*halfLen); err != nil {
		return nil, err
	}
	opt := verbs.ConnectOptions{}
	if pkeyIndex != 0 {
		// A partition that may not carry the traffic: end its WRITE soon.
		opt = verbs.ConnectOptions{Set: verbs.AttrPKeyIndex | verbs.AttrTimeout | verbs.AttrRetryCnt,
			Attr: verbs.QPAttr{PKeyIndex: pkeyIndex, Timeout: 12, RetryCnt: 1}}
	}
	if err := connectWith(p.a, p.b, opt); err != nil {
		return nil, err
	}
	p.opt = opt
	go p.run()
	return p, nil
}

// run is the legitimate traffic, until stop.
func (p *pair) run() {
	defer close(p.done)
	want := make([]byte, slotLen)
	for k := 1; ; k++ {
		select {
		case <-p.stop:
			return
		case <-time.After(writeGap):
		}
		p.gate.Lock()
		select {
		case <-p.stop:
			p.gate.Unlock()
			return
		default:
		}
		s := k % slots
		p.mu.Lock()
		p.st.Posted++
		p.mu.Unlock()
		pattern(k, p.a.mr.Bytes()[s*slotLen:(s+1)*slotLen])
		st, err := writeWait(p.a, s*slotLen, slotLen, p.b.mr.Addr()+uint64(s*slotLen), p.b.mr.RKey())
		p.mu.Lock()
		switch {
		case err != nil || st != verbs.WCSuccess:
			p.st.Errors++
			if p.st.LastErr == "" {
				p.st.LastErr = fmt.Sprintf("write %d: %v %v", k, st, err)
			}
		default:
			pattern(k, want)
			if !bytes.Equal(p.b.mr.Bytes()[s*slotLen:(s+1)*slotLen], want) {
				p.st.Lost++
			} else {
				p.st.Writes++
			}
			p.last[s] = k
			for i, kk := range p.last {
				if kk == 0 || i == s {
					continue
				}
				pattern(kk, want)
				if !bytes.Equal(p.b.mr.Bytes()[i*slotLen:(i+1)*slotLen], want) {
					p.st.Reverted++
					p.last[i] = 0 // count each damage once
				}
			}
		}
		dead := p.a.qp.State() == verbs.QPSErr
		p.mu.Unlock()
		p.gate.Unlock()
		if dead {
			return
		}
	}
}

func (p *pair) status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.st
	st.StateA, st.StateB = p.a.qp.State().String(), p.b.qp.State().String()
	if st.LastErr == "" && p.a.qp.Err() != nil {
		st.LastErr = p.a.qp.Err().Error()
	}
	st.Counted = p.counted()
	if p.freed != nil {
		st.Freed = !bytes.Equal(p.freed, p.snap)
	} else {
		st.Canary = !allZero(p.b.mr.Bytes()[halfLen:])
	}
	return st
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func (p *pair) do(c command) Status {
	switch c.Cmd {
	case "status":
		return p.status()
	case "pause":
		if !p.paused {
			p.gate.Lock()
			p.paused = true
		}
		return p.status()
	case "resume":
		if p.paused {
			p.paused = false
			p.gate.Unlock()
		}
		return p.status()
	case "reconnect":
		// A new pair of QPs (new QPNs and PSNs) over the same MRs, as an
		// application reconnecting does; B's slots are cleared.
		if !p.paused {
			p.gate.Lock()
		}
		defer func() {
			if !p.paused {
				p.gate.Unlock()
			}
		}()
		for _, e := range []*end{p.a, p.b} {
			if err := e.qp.Destroy(); err != nil {
				return Status{Err: err.Error()}
			}
			qp, err := e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16}})
			if err != nil {
				return Status{Err: err.Error()}
			}
			e.qp = qp
		}
		if err := connectWith(p.a, p.b, p.opt); err != nil {
			return Status{Err: err.Error()}
		}
		p.mu.Lock()
		clear(p.b.mr.Bytes()[:halfLen])
		p.last = [slots]int{}
		p.mu.Unlock()
		return p.status()
	case "dereg", "keep":
		// Pause for good and deregister B's MR (keep: leave it registered,
		// the control), keeping its bytes to see whether anything still
		// writes them.
		if !p.paused {
			p.gate.Lock()
			p.paused = true
		}
		if p.freed == nil && !useAlloc {
			p.freed = p.b.mr.Bytes()
			p.snap = append([]byte(nil), p.freed...)
			if c.Cmd == "dereg" {
				if err := p.b.mr.Dereg(); err != nil {
					return Status{Err: err.Error()}
				}
			}
		}
		return p.status()
	case "hole":
		// Stop the stream, make B drop everything, and send one WRITE
		// that only a forged ACK can complete.
		p.halt()
		if err := p.b.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState); err != nil {
			return Status{Err: err.Error()}
		}
		p.hole = make(chan struct{})
		p.mu.Lock()
		p.st.Posted++
		p.mu.Unlock()
		go func() {
			defer close(p.hole)
			pattern(-1, p.a.mr.Bytes()[:slotLen])
			st, err := writeWait(p.a, 0, slotLen, p.b.mr.Addr()+halfLen, p.b.mr.RKey())
			p.mu.Lock()
			defer p.mu.Unlock()
			p.st.Hole = st.String()
			if err != nil {
				p.st.Hole = err.Error()
			}
		}()
		return p.status()
	}
	return Status{Err: fmt.Sprintf("pair victim: unknown command %q", c.Cmd)}
}

func (p *pair) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	if p.paused {
		p.paused = false
		p.gate.Unlock()
	}
	<-p.done
}

func (p *pair) close() {
	p.halt()
	if p.hole != nil {
		<-p.hole
	}
	for _, e := range []*end{p.a, p.b} {
		_ = e.qp.Destroy()
	}
}

// server accepts client QPs (each connect replaces the last) in one PD,
// and holds a secret MR, in another PD or the same one, into whose first
// slot a legitimate writer of its own writes.
type server struct {
	ctx    *verbs.Context
	client *verbs.PD
	grant  *verbs.MR
	cq     *verbs.CQ
	qp     *verbs.QP
	sec    *end // the secret MR's side
	w      *end // the legitimate writer
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	bad    bool
}

func newServer(dev, a, b string, samePD bool) (*server, error) {
	cs, err := open(dev, "atsrv", b)
	if err != nil {
		return nil, err
	}
	cw := cs
	if dev == "" {
		if cw, err = open(dev, "atsrvw", a); err != nil {
			return nil, err
		}
	}
	s := &server{ctx: cs, stop: make(chan struct{}), done: make(chan struct{})}
	if s.client, err = cs.AllocPD(); err != nil {
		return nil, err
	}
	if s.grant, err = regMR(s.client, halfLen); err != nil {
		return nil, err
	}
	if s.cq, err = cs.CreateCQ(64); err != nil {
		return nil, err
	}
	var secPD *verbs.PD
	if samePD {
		secPD = s.client
	}
	if s.sec, err = newEnd(cs, secPD, halfLen); err != nil {
		return nil, err
	}
	if s.w, err = newEnd(cw, nil, slotLen); err != nil {
		return nil, err
	}
	if err := connect(s.w, s.sec); err != nil {
		return nil, err
	}
	go s.run()
	return s, nil
}

// run writes the secret MR's first slot, as its legitimate user does.
func (s *server) run() {
	defer close(s.done)
	for k := 1; ; k++ {
		select {
		case <-s.stop:
			return
		case <-time.After(writeGap):
		}
		pattern(k, s.w.mr.Bytes())
		if st, err := writeWait(s.w, 0, slotLen, s.sec.mr.Addr(), s.sec.mr.RKey()); err != nil || st != verbs.WCSuccess {
			s.mu.Lock()
			s.bad = true
			s.mu.Unlock()
			return
		}
	}
}

func (s *server) status() Status {
	st := Status{Secret: !allZero(s.sec.mr.Bytes()[slotLen:])}
	s.mu.Lock()
	if s.bad {
		st.LastErr = "the legitimate writer failed"
	}
	s.mu.Unlock()
	if s.qp != nil {
		st.QPN, st.PSN = s.qp.Num(), s.qp.InitialPSN()
		st.StateB = s.qp.State().String()
	}
	st.RKey, st.VA, st.Len = s.grant.RKey(), s.grant.Addr(), uint64(s.grant.Len())
	return st
}

func (s *server) do(c command) Status {
	switch c.Cmd {
	case "status":
		return s.status()
	case "connect":
		if s.qp != nil {
			_ = s.qp.Destroy()
			s.qp = nil
		}
		ap, err := netip.ParseAddr(c.Addr)
		if err != nil {
			return Status{Err: err.Error()}
		}
		qp, err := s.client.CreateQP(verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
		if err != nil {
			return Status{Err: err.Error()}
		}
		ci := qp.Info()
		// The attacker's QP announces no SPI: it has no key to encrypt with.
		ci.QPN, ci.PSN, ci.GID, ci.SPI = c.QPN, c.PSN, verbs.GID(ap.As16()), 0
		if err := qp.Connect(ci, verbs.ConnectOptions{}); err != nil {
			_ = qp.Destroy()
			return Status{Err: err.Error()}
		}
		s.qp = qp
		return s.status()
	}
	return Status{Err: fmt.Sprintf("server victim: unknown command %q", c.Cmd)}
}

func (s *server) close() {
	close(s.stop)
	<-s.done
	if s.qp != nil {
		_ = s.qp.Destroy()
	}
}

var errVictimGone = errors.New("victim process ended")

// counted sums the drop counters of the pair's devices and its QPs.
func (p *pair) counted() string {
	var c udp.PortCounters
	for _, d := range p.devs {
		if x, ok := udp.Counters(d); ok {
			c.PortRcvErrors += x.PortRcvErrors
			c.ICRCErrors += x.ICRCErrors
			c.UnknownQP += x.UnknownQP
			c.SrcAddrErrors += x.SrcAddrErrors
			c.PKeyViolations += x.PKeyViolations
			c.PSPAuthErrors += x.PSPAuthErrors
			c.PSPReplayDrops += x.PSPReplayDrops
			c.PSPUnknownSPI += x.PSPUnknownSPI
			c.PSPPlaintextDrops += x.PSPPlaintextDrops
		}
	}
	a, b := p.a.qp.Stats(), p.b.qp.Stats()
	var out []string
	for _, x := range []struct {
		name string
		n    uint64
	}{
		{"PortRcvErrors", c.PortRcvErrors}, {"ICRCErrors", c.ICRCErrors}, {"UnknownQP", c.UnknownQP},
		{"SrcAddrErrors", c.SrcAddrErrors}, {"PKeyViolations", c.PKeyViolations},
		{"PSPAuthErrors", c.PSPAuthErrors}, {"PSPReplayDrops", c.PSPReplayDrops},
		{"PSPUnknownSPI", c.PSPUnknownSPI}, {"PSPPlaintextDrops", c.PSPPlaintextDrops},
		{"OutOfWindow", a.OutOfWindow + b.OutOfWindow}, {"Duplicates", a.Duplicates + b.Duplicates},
		{"OutOfSequence", a.OutOfSequence + b.OutOfSequence}, {"ErrNaksRecv", a.ErrNaksRecv},
	} {
		if x.n != 0 {
			out = append(out, fmt.Sprintf("%s %d", x.name, x.n))
		}
	}
	return strings.Join(out, ", ")
}
