package rc_test

// Scripted scenarios (etcd raft's interaction tests are the model): each
// file in testdata/ is one behaviour, a sequence of commands, each with
// the output it must produce. Two engines, a and b, are joined by an
// rctest network that holds every datagram until the script delivers,
// drops or duplicates it, so the script decides what arrives and when.
// A change of behaviour shows as a diff of the output; -rc.rewrite writes
// the new output into the files (review it before committing). The expect
// commands assert as well, so a rewrite cannot bless what a scenario is
// about.
//
// A block is a command line, a line "----", and the output, up to a blank
// line. Lines starting with # are comments. Commands:
//
//	connect [mtu=N window=N timeout=N retry=N rnr_retry=N min_rnr=N rd_atomic=N min_rto=DUR psn_a=X psn_b=X]
//	post a|b send|send_imm|write|write_imm|read|cmp_swap|fetch_add id=N [len=N addr=X rkey=X local=X imm=X compare=X swap=X add=X fence solicited]
//	recv a|b id=N [len=N addr=X]       post a receive
//	deliver [#N ...]                    deliver the held datagrams named (default: all held)
//	drop #N ...                         lose held datagrams
//	dup #N                              hold a copy of a held datagram
//	mark #N ...                         set ECN CE on held datagrams (a congested switch)
//	stabilize                           deliver all, repeatedly, until nothing is held
//	tick DUR                            advance the clock, firing every timer on the way
//	partition, heal                     cut the network (what is sent meanwhile is lost), restore it
//	mem a|b ADDR N                      print memory
//	stats a|b                           print the engine's nonzero counters
//	expect a|b sends STATUS...          the send completions so far, in order
//	expect a|b recvs STATUS...          the receive completions so far
//	expect a|b word ADDR VALUE          the little-endian 64-bit word at ADDR
//	expect a|b stat NAME VALUE          an rc.Stats counter
//	expect a|b window N                 the requester's send window (rc.Conn.SendWindow)
//	expect a|b running|stopped
//	expect held N                       datagrams held
//
// After every command both engines send what they can; the output lists,
// in order and stamped with the clock, every datagram sent (with its
// number while held, or how it was lost), the datagrams each side
// received, completions, timeouts and stops. The engine invariants and
// the Host contract are checked after every command.

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/rc/rctest"
	"github.com/ibex-rdma/ibex/wire"
)

var flagRewrite = flag.Bool("rc.rewrite", false, "scenarios: write the actual output into testdata/*.txt")

// Memory of both sides in a scenario: local data at 0x10000, receives at
// 0x14000 (zero), the region rkey 0x5eed grants at 0x18000; local data
// and region hold patterns that differ between a and b.
const (
	scBase    = 0x10000
	scLocal   = 0x10000
	scRecv    = 0x14000
	scRegion  = 0x18000
	scRKey    = 0x5eed
	scMemSize = 0x10000
)

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in testdata: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) { runScenario(t, file) })
	}
}

// block is one command of a script and the output it must produce.
type block struct {
	line int // of the command
	cmd  string
	want string
	// in the file: the lines before the output, and those after it
	head []string
}

func parseScript(text string) ([]block, []string, error) {
	var blocks []block
	var head []string
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		head = append(head, l)
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "----" {
			return nil, nil, fmt.Errorf("line %d: %q: want a line \"----\" after a command", i+1, l)
		}
		b := block{line: i + 1, cmd: l}
		head = append(head, "----")
		i += 2
		var out []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			out = append(out, lines[i])
		}
		if len(out) > 0 {
			b.want = strings.Join(out, "\n") + "\n"
		}
		b.head, head = head, nil
		blocks = append(blocks, b)
		if i < len(lines) {
			head = append(head, "")
		}
	}
	return blocks, head, nil
}

func runScenario(t *testing.T, file string) {
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blocks, tail, err := parseScript(string(text))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	s := &scenario{t: t}
	var rewritten strings.Builder
	for i := range blocks {
		b := &blocks[i]
		s.out.Reset()
		if err := s.run(b.cmd); err != nil {
			t.Fatalf("%s:%d: %s: %v", file, b.line, b.cmd, err)
		}
		got := s.out.String()
		if got != b.want && !*flagRewrite {
			t.Errorf("%s:%d: %s: output differs (-rc.rewrite to accept it)\n--- want\n%s--- got\n%s", file, b.line, b.cmd, b.want, got)
		}
		for _, l := range b.head {
			rewritten.WriteString(l + "\n")
		}
		rewritten.WriteString(got)
	}
	for _, l := range tail {
		rewritten.WriteString(l + "\n")
	}
	if *flagRewrite {
		if err := os.WriteFile(file, []byte(rewritten.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// scenario is the state of one script.
type scenario struct {
	t     *testing.T
	net   *rctest.Network
	q     [2]*rctest.QP
	out   bytes.Buffer
	sends [2]int // completions already reported
	recvs [2]int
	stop  [2]bool
	tmo   [2]uint64
}

var scAddr = [2]netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791")}

func (s *scenario) printf(format string, args ...any) {
	fmt.Fprintf(&s.out, "[%v] "+format+"\n", append([]any{time.Duration(s.net.Now())}, args...)...)
}

func sideName(i int) string { return string(rune('a' + i)) }

func (s *scenario) side(name string) (int, error) {
	switch name {
	case "a":
		return 0, nil
	case "b":
		return 1, nil
	}
	return 0, fmt.Errorf("side %q: want a or b", name)
}

// args parses key=value arguments; bare words are set to "".
func args(fields []string) map[string]string {
	m := map[string]string{}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

func num(m map[string]string, key string, def uint64) (uint64, error) {
	v, ok := m[key]
	if !ok {
		return def, nil
	}
	n, err := strconv.ParseUint(v, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%s: %v", key, v, err)
	}
	return n, nil
}

func (s *scenario) run(line string) error {
	f := strings.Fields(line)
	cmd, rest := f[0], f[1:]
	if cmd != "connect" && s.net == nil {
		return fmt.Errorf("connect first")
	}
	var err error
	switch cmd {
	case "connect":
		err = s.connect(args(rest))
	case "post":
		err = s.post(rest)
	case "recv":
		err = s.recv(rest)
	case "deliver":
		err = s.deliver(rest)
	case "drop":
		err = s.eachHeld(rest, func(id uint64) error {
			if !s.net.Drop(id) {
				return fmt.Errorf("#%d is not held", id)
			}
			s.printf("#%d dropped", id)
			return nil
		})
	case "dup":
		err = s.eachHeld(rest, func(id uint64) error {
			c, ok := s.net.Duplicate(id)
			if !ok {
				return fmt.Errorf("#%d is not held", id)
			}
			s.printf("#%d is a copy of #%d", c, id)
			return nil
		})
	case "mark":
		err = s.eachHeld(rest, func(id uint64) error {
			if !s.net.Mark(id) {
				return fmt.Errorf("#%d is not held", id)
			}
			s.printf("#%d marked CE", id)
			return nil
		})
	case "stabilize":
		err = s.stabilize()
	case "tick":
		err = s.tick(rest)
	case "partition":
		s.net.Partition()
	case "heal":
		s.net.Heal()
	case "mem":
		err = s.mem(rest)
	case "stats":
		err = s.stats(rest)
	case "expect":
		err = s.expect(rest)
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		return err
	}
	return s.settle()
}

func (s *scenario) connect(m map[string]string) error {
	var bad error
	get := func(k string, def uint64) uint64 {
		v, err := num(m, k, def)
		if err != nil && bad == nil {
			bad = err
		}
		return v
	}
	minRTO := time.Millisecond
	if v, ok := m["min_rto"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		minRTO = d
	}
	psn := [2]uint32{uint32(get("psn_a", 0x100)), uint32(get("psn_b", 0x200))}
	s.net = rctest.NewNetwork(1, rctest.Faults{Hold: true})
	s.net.Tap(s.tap)
	for i := range 2 {
		h := rctest.NewHost(sideName(i), scBase, scMemSize)
		for k := range scRecv - scLocal {
			h.Mem[k] = byte(k*7 + i*101)
		}
		for k := scRegion - scBase; k < scMemSize; k++ {
			h.Mem[k] = byte(k*13 + i*29 + 1)
		}
		h.Register(rctest.Region{RKey: scRKey, Addr: scRegion, Len: scBase + scMemSize - scRegion,
			Access: ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic})
		cfg := rc.Config{QPN: 0x11 + uint32(i), DestQPN: 0x12 - uint32(i), SendPSN: psn[i], RecvPSN: psn[1-i],
			MTU: int(get("mtu", 1024)), Timeout: uint8(get("timeout", 14)), RetryCnt: uint8(get("retry", 7)),
			RNRRetry: uint8(get("rnr_retry", 7)), MinRNRTimer: uint8(get("min_rnr", 1)),
			MaxRdAtomic: int(get("rd_atomic", 4)), MaxDestRdAtomic: int(get("rd_atomic", 4)),
			Access: ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic,
			Window: int(get("window", 0)), MinRTO: minRTO.Nanoseconds()}
		if bad != nil {
			return bad
		}
		q, err := rctest.NewQP(s.net, scAddr[i], scAddr[1-i], cfg, h)
		if err != nil {
			return err
		}
		s.q[i] = q
	}
	return nil
}

func (s *scenario) name(a netip.AddrPort) string {
	if a == scAddr[0] {
		return "a"
	}
	return "b"
}

// tap prints every datagram the network is given.
func (s *scenario) tap(d *rctest.Datagram, fate rctest.Fate) {
	var wp wire.Packet
	desc := fmt.Sprintf("%d bytes that do not decode", len(d.Data))
	if wire.DecodeIB(d.Data, &wp) == nil {
		desc = wp.String()
	}
	switch fate {
	case rctest.Held, rctest.Queued:
		s.printf("%s -> %s #%d %s", s.name(d.From), s.name(d.To), d.ID, desc)
	default:
		s.printf("%s -> %s %v: %s", s.name(d.From), s.name(d.To), fate, desc)
	}
}

var ops = map[string]ib.WROpcode{
	"send": ib.WRSend, "send_imm": ib.WRSendWithImm, "write": ib.WRRDMAWrite, "write_imm": ib.WRRDMAWriteWithImm,
	"read": ib.WRRDMARead, "cmp_swap": ib.WRAtomicCmpAndSwp, "fetch_add": ib.WRAtomicFetchAndAdd,
}

func (s *scenario) post(f []string) error {
	if len(f) < 2 {
		return fmt.Errorf("post a|b OP id=N ...")
	}
	i, err := s.side(f[0])
	if err != nil {
		return err
	}
	op, ok := ops[f[1]]
	if !ok {
		return fmt.Errorf("opcode %q unknown", f[1])
	}
	m := args(f[2:])
	var v [8]uint64
	for k, key := range []string{"id", "len", "addr", "rkey", "local", "imm", "compare", "swap"} {
		def := map[string]uint64{"len": 8, "addr": scRegion, "rkey": scRKey, "local": scLocal}[key]
		if v[k], err = num(m, key, def); err != nil {
			return err
		}
	}
	req := rc.Request{ID: v[0], Op: op, Len: uint32(v[1]), RemoteAddr: v[2], RKey: uint32(v[3]), Imm: uint32(v[5]),
		CompareAdd: v[6], Swap: v[7]}
	if op == ib.WRAtomicFetchAndAdd {
		if req.CompareAdd, err = num(m, "add", 1); err != nil {
			return err
		}
	}
	_, req.Fence = m["fence"]
	_, req.Solicited = m["solicited"]
	return s.q[i].Host.Post(s.q[i].Conn, req, v[4])
}

func (s *scenario) recv(f []string) error {
	if len(f) < 1 {
		return fmt.Errorf("recv a|b id=N ...")
	}
	i, err := s.side(f[0])
	if err != nil {
		return err
	}
	m := args(f[1:])
	id, err := num(m, "id", 0)
	if err != nil {
		return err
	}
	n, err := num(m, "len", 4096)
	if err != nil {
		return err
	}
	addr, err := num(m, "addr", scRecv)
	if err != nil {
		return err
	}
	s.q[i].Host.PostRecv(id, addr, uint32(n))
	return nil
}

func (s *scenario) eachHeld(f []string, fn func(uint64) error) error {
	if len(f) == 0 {
		return fmt.Errorf("name the datagrams: #N ...")
	}
	for _, a := range f {
		id, err := strconv.ParseUint(strings.TrimPrefix(a, "#"), 10, 64)
		if err != nil {
			return fmt.Errorf("%q: want #N", a)
		}
		if err := fn(id); err != nil {
			return err
		}
	}
	return nil
}

// deliver hands the datagrams named (or all held) to their receivers, who
// take them as one batch each.
func (s *scenario) deliver(f []string) error {
	var ids []uint64
	if len(f) == 0 {
		for _, d := range s.net.Held() {
			ids = append(ids, d.ID)
		}
	} else if err := s.eachHeld(f, func(id uint64) error { ids = append(ids, id); return nil }); err != nil {
		return err
	}
	var got [2][]string
	for _, id := range ids {
		held := s.net.Held()
		k := slices.IndexFunc(held, func(d rctest.Datagram) bool { return d.ID == id })
		if k < 0 || !s.net.Deliver(id) {
			return fmt.Errorf("#%d is not held", id)
		}
		to := 0
		if held[k].To == scAddr[1] {
			to = 1
		}
		got[to] = append(got[to], fmt.Sprintf("#%d", id))
	}
	for i, q := range s.q {
		if len(got[i]) == 0 {
			continue
		}
		s.printf("%s <- %s", sideName(i), strings.Join(got[i], " "))
		if _, err := q.Deliver(len(got[i])); err != nil {
			return err
		}
		if err := s.settle(); err != nil {
			return err
		}
	}
	return nil
}

func (s *scenario) stabilize() error {
	for range 100 {
		if len(s.net.Held()) == 0 {
			return nil
		}
		if err := s.deliver(nil); err != nil {
			return err
		}
	}
	return fmt.Errorf("still exchanging after 100 rounds")
}

func (s *scenario) tick(f []string) error {
	if len(f) != 1 {
		return fmt.Errorf("tick DURATION")
	}
	d, err := time.ParseDuration(f[0])
	if err != nil {
		return err
	}
	end := s.net.Now() + d.Nanoseconds()
	for {
		next := end
		for _, q := range s.q {
			if dl := q.Conn.Deadline(); dl != 0 && dl < next {
				next = dl
			}
		}
		s.net.Advance(next)
		for _, q := range s.q {
			q.Tick()
		}
		if err := s.settle(); err != nil {
			return err
		}
		if next >= end {
			return nil
		}
	}
}

// settle lets both engines send, reports what happened and checks the
// invariants.
func (s *scenario) settle() error {
	for i, q := range s.q {
		if t := q.Conn.Stats().Timeouts; t != s.tmo[i] {
			s.printf("%s: retransmit timeout (%d so far)", sideName(i), t)
			s.tmo[i] = t
		}
		s.report(i)
		if _, err := q.Flush(); err != nil {
			return err
		}
		s.report(i)
	}
	for i, q := range s.q {
		if err := check(q.Conn); err != nil {
			return fmt.Errorf("%s: %v\n%s", sideName(i), err, rc.DebugState(q.Conn))
		}
		if err := q.Host.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (s *scenario) report(i int) {
	h := s.q[i].Host
	for ; s.sends[i] < len(h.Sends); s.sends[i]++ {
		c := h.Sends[s.sends[i]]
		line := fmt.Sprintf("%s: send completion %d %v len %d", sideName(i), c.ID, c.Status, c.Len)
		if c.Cause != nil {
			line += ": " + c.Cause.Error()
		}
		s.printf("%s", line)
	}
	for ; s.recvs[i] < len(h.Recvs); s.recvs[i]++ {
		c := h.Recvs[s.recvs[i]]
		line := fmt.Sprintf("%s: recv completion %d %v len %d", sideName(i), c.ID, c.Status, c.Len)
		if c.HasImm {
			line += fmt.Sprintf(" imm %#x", c.Imm)
		}
		if c.Write {
			line += " (RDMA WRITE with immediate)"
		}
		s.printf("%s", line)
	}
	if h.Stop != nil && !s.stop[i] {
		s.stop[i] = true
		if len(h.Sends) == 0 || h.Sends[len(h.Sends)-1].Cause != h.Stop {
			s.printf("%s: stopped: %v", sideName(i), h.Stop)
		}
	}
}

func (s *scenario) mem(f []string) error {
	if len(f) != 3 {
		return fmt.Errorf("mem a|b ADDR N")
	}
	i, err := s.side(f[0])
	if err != nil {
		return err
	}
	addr, err1 := strconv.ParseUint(f[1], 0, 64)
	n, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return fmt.Errorf("mem a|b ADDR N")
	}
	b := s.q[i].Host.Bytes(addr, n)
	for off := 0; off < n; off += 16 {
		fmt.Fprintf(&s.out, "%s %#x: % x\n", sideName(i), addr+uint64(off), b[off:min(off+16, n)])
	}
	return nil
}

func (s *scenario) stats(f []string) error {
	if len(f) != 1 {
		return fmt.Errorf("stats a|b")
	}
	i, err := s.side(f[0])
	if err != nil {
		return err
	}
	st := reflect.ValueOf(s.q[i].Conn.Stats())
	var parts []string
	for k := range st.NumField() {
		if v := st.Field(k).Uint(); v != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", st.Type().Field(k).Name, v))
		}
	}
	fmt.Fprintf(&s.out, "%s: %s\n", sideName(i), strings.Join(parts, " "))
	return nil
}

func (s *scenario) expect(f []string) error {
	if len(f) == 2 && f[0] == "held" {
		n, err := strconv.Atoi(f[1])
		if err != nil {
			return err
		}
		if got := len(s.net.Held()); got != n {
			return fmt.Errorf("%d datagrams held, want %d", got, n)
		}
		return nil
	}
	if len(f) < 2 {
		return fmt.Errorf("expect a|b WHAT ...")
	}
	i, err := s.side(f[0])
	if err != nil {
		return err
	}
	h, c := s.q[i].Host, s.q[i].Conn
	switch what, rest := f[1], f[2:]; what {
	case "sends", "recvs":
		var got []string
		if what == "sends" {
			for _, c := range h.Sends {
				got = append(got, c.Status.String())
			}
		} else {
			for _, c := range h.Recvs {
				got = append(got, c.Status.String())
			}
		}
		if !slices.Equal(got, rest) && !(len(got) == 0 && len(rest) == 0) {
			return fmt.Errorf("%s %v, want %v", what, got, rest)
		}
	case "word":
		if len(rest) != 2 {
			return fmt.Errorf("expect a|b word ADDR VALUE")
		}
		addr, err1 := strconv.ParseUint(rest[0], 0, 64)
		want, err2 := strconv.ParseUint(rest[1], 0, 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("expect a|b word ADDR VALUE")
		}
		if got := binary.LittleEndian.Uint64(h.Bytes(addr, 8)); got != want {
			return fmt.Errorf("word at %#x is %#x, want %#x", addr, got, want)
		}
	case "stat":
		if len(rest) != 2 {
			return fmt.Errorf("expect a|b stat NAME VALUE")
		}
		v := reflect.ValueOf(c.Stats()).FieldByName(rest[0])
		want, err := strconv.ParseUint(rest[1], 0, 64)
		if !v.IsValid() || err != nil {
			return fmt.Errorf("expect a|b stat NAME VALUE: no counter %q in rc.Stats, or a bad value", rest[0])
		}
		if v.Uint() != want {
			return fmt.Errorf("%s is %d, want %d", rest[0], v.Uint(), want)
		}
	case "window":
		want, err := strconv.Atoi(strings.Join(rest, ""))
		if len(rest) != 1 || err != nil {
			return fmt.Errorf("expect a|b window N")
		}
		if got := c.SendWindow(); got != want {
			return fmt.Errorf("send window %d, want %d", got, want)
		}
	case "running", "stopped":
		if (h.Stop != nil) != (what == "stopped") {
			return fmt.Errorf("not %s (stop: %v)", what, h.Stop)
		}
	default:
		return fmt.Errorf("expect %q: unknown", what)
	}
	return nil
}
