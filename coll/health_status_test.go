package coll

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
)

// The fake ranks of TestStatusClassify: heartbeats every 100 ms, so "not
// heard from" after 0.4 s, stalled after 0.5 s behind, dead after 2.5 s
// silent.
const testEvery = 100 * time.Millisecond

// fake is one rank's view for classify.
type fake struct {
	calls   uint64 // collectives begun
	state   uint32 // its latest record's: recRunning, recDone, recFailed (0: no call)
	op      algo.Collective
	bytes   int64
	ago     time.Duration // since the record's start (running, failed) or end (done)
	heard   time.Duration
	broken  bool
	lost    string
	pidGone bool
	noHello bool
	step    int32
	counts  map[algo.Collective]uint64 // default: all calls of op
	closed  bool
}

func fakeViews(fs []fake) []rankView {
	const sent = int64(1e18)
	vs := make([]rankView, len(fs))
	for r, f := range fs {
		v := rankView{rank: r, heardAgo: f.heard, pidGone: f.pidGone}
		s := &v.slot
		if !f.noHello {
			s.hello, s.pid, s.host, s.beats = true, 1000+r, "h", 10
			s.born = sent - int64(time.Hour)
			s.b.sent, s.b.calls = sent, f.calls
			s.lost, s.bye = f.lost, f.closed
			op := f.op
			if op == 0 {
				op = algo.AllReduce
			}
			bytes := f.bytes
			if bytes == 0 {
				bytes = 4096
			}
			if f.state != 0 {
				d := descriptor(op, algo.Ring, int(bytes/4), reduce.Float32, reduce.Sum, 0)
				s.b.rec = rawRecord{seq: f.calls, what: packWhat(recOp(op), d, modeLL, 2), bytes: bytes, state: f.state, step: f.step}
				if f.state == recDone {
					s.b.rec.start, s.b.rec.end = sent-int64(f.ago)-1000, sent-int64(f.ago)
				} else {
					s.b.rec.start = sent - int64(f.ago)
				}
				if f.state == recFailed {
					s.b.rec.end = sent
				}
			}
			if f.counts == nil {
				s.b.counts[op] = f.calls
			}
			for k, n := range f.counts {
				s.b.counts[k] = n
			}
			if f.broken {
				s.b.commState = commBroken
				s.err = "coll: it failed"
			} else {
				s.b.commState = commReady
			}
		}
		vs[r] = v
	}
	return vs
}

// TestStatusClassify: the health of each rank and the findings naming the
// outliers, from made-up heartbeats.
func TestStatusClassify(t *testing.T) {
	idle := func(calls uint64, ago time.Duration) fake { return fake{calls: calls, state: recDone, ago: ago} }
	in := func(calls uint64, ago time.Duration) fake { return fake{calls: calls, state: recRunning, ago: ago} }
	s := time.Second
	for _, tc := range []struct {
		name    string
		ranks   []fake
		verbose bool
		health  []string
		finds   []string // substrings of the findings' texts, in order (errors, then warnings)
	}{
		{"all well", []fake{idle(5, s), idle(5, s), in(6, s/10)},
			false, []string{"behind", "behind", "ok"}, []string{"COUNTS collective counts differ: 1 rank has begun collective #6; 2 ranks have begun collective #5\n"}},
		{"stalled before the call", []fake{in(5, 2*s), in(5, 2*s), idle(4, 2*s), in(5, 2*s)},
			false, []string{"ok", "ok", "stalled", "ok"},
			[]string{"STALLED rank 2 (pid 1002 on h) is stalled: idle after all_reduce #4 for 2.0 s; past it: ranks 0,1,3 in all_reduce #5 step 1/2",
				"COUNTS collective counts differ: 3 ranks have begun collective #5; 1 rank has begun collective #4: rank 2 (pid 1002 on h)"}},
		{"stalled in the call", []fake{idle(5, 3*s), idle(5, 3*s), in(5, 3*s)},
			false, []string{"ok", "ok", "stalled"}, []string{"STALLED rank 2 (pid 1002 on h) is stalled: in all_reduce #5 step 1/2 for 3.0 s; past it: ranks 0,1 idle after all_reduce #5"}},
		{"behind, not for long", []fake{in(5, s/5), idle(4, s/5), in(5, s/5), in(5, s/5)},
			false, []string{"ok", "behind", "ok", "ok"}, []string{"COUNTS collective counts differ: 3 ranks have begun collective #5; 1 rank has begun collective #4: rank 1 (pid 1001 on h)"}},
		{"idle long, others just began", []fake{in(5, s/10), idle(4, 10*s), in(5, s/10), in(5, s/10)},
			false, []string{"ok", "behind", "ok", "ok"}, []string{"COUNTS"}},
		{"dead, silent, never", []fake{
			in(5, s),
			{calls: 4, state: recDone, ago: s, lost: "its heartbeat connection closed without a goodbye", heard: s},
			{calls: 5, state: recRunning, ago: s, pidGone: true},
			{calls: 5, state: recRunning, ago: s, heard: 3 * s},
			{calls: 5, state: recRunning, ago: s, heard: s / 2},
			{noHello: true}},
			false, []string{"ok", "dead", "dead", "dead", "not heard from", "not heard from"},
			[]string{"DEAD rank 1 (pid 1001 on h) is dead: its heartbeat connection closed without a goodbye; its last heartbeat, 1.0 s ago, said: idle after all_reduce #4",
				"DEAD rank 2 (pid 1002 on h) is dead: pid 1002 is gone",
				"DEAD rank 3 (pid 1003 on h) is dead: silent for 3.0 s",
				"NOT_HEARD_FROM rank 4 (pid 1004 on h) not heard from for 0.5 s; it was in all_reduce #5",
				"NOT_HEARD_FROM rank 5 never reported"}},
		{"failed and closed", []fake{{calls: 3, state: recFailed, ago: s, broken: true}, {calls: 3, state: recDone, closed: true}, in(3, s)},
			false, []string{"failed", "closed", "ok"}, []string{"FAILED rank 0 (pid 1000 on h) failed in all_reduce #3 at step 1/2, 0.0 s ago: coll: it failed"}},
		{"mismatch", []fake{in(5, s/10), in(5, s/10), {calls: 5, state: recRunning, ago: s / 10, op: algo.Broadcast, counts: map[algo.Collective]uint64{algo.AllReduce: 4, algo.Broadcast: 1}}, in(5, s/10)},
			false, []string{"ok", "ok", "ok", "ok"},
			[]string{"MISMATCH ranks differ in collective #5: ranks 0,1,3: all_reduce of 4096 B float sum; rank 2 (pid 1002 on h): broadcast of 4096 B float (root 0)",
				"MISMATCH ranks at collective #5 made different collectives before: ranks 0,1,3: all_reduce 5; rank 2 (pid 1002 on h): all_reduce 4, broadcast 1"}},
		// NCCL's rule: a group of at most 25% of the ranks (and 10) is
		// named; verbose, under 50%.
		{"counts: one of 8 named", []fake{idle(5, s/10), idle(5, s/10), idle(5, s/10), idle(5, s/10), idle(5, s/10), idle(5, s/10), idle(5, s/10), idle(4, s/10)},
			false, nil, []string{"COUNTS collective counts differ: 7 ranks have begun collective #5; 1 rank has begun collective #4: rank 7 (pid 1007 on h)"}},
		{"counts: three of 8 not named", []fake{idle(5, s/10), idle(5, s/10), idle(5, s/10), idle(5, s/10), idle(5, s/10), idle(4, s/10), idle(4, s/10), idle(4, s/10)},
			false, nil, []string{"COUNTS collective counts differ: 5 ranks have begun collective #5; 3 ranks have begun collective #4"}},
		{"counts: three of 8 named when verbose", []fake{idle(5, s/10), idle(5, s/10), idle(5, s/10), idle(5, s/10), idle(5, s/10), idle(4, s/10), idle(4, s/10), idle(4, s/10)},
			true, nil, []string{"COUNTS collective counts differ: 5 ranks have begun collective #5; 3 ranks have begun collective #4: rank 5 (pid 1005 on h), rank 6 (pid 1006 on h), rank 7 (pid 1007 on h)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := classify("c0ffee", len(tc.ranks), "addr", testEvery, fakeViews(tc.ranks), tc.verbose)
			for r, want := range tc.health {
				if got := cs.Ranks[r].Health; got != want {
					t.Errorf("rank %d: %q, want %q (%+v)", r, got, want, cs.Ranks[r])
				}
			}
			var got []string
			for _, f := range append(cs.Errors, cs.Warnings...) {
				got = append(got, f.Kind+" "+f.Text+"\n")
			}
			if len(got) != len(tc.finds) {
				t.Fatalf("findings:\n%s\nwant %d:\n%s", strings.Join(got, "\n"), len(tc.finds), strings.Join(tc.finds, "\n"))
			}
			for i, want := range tc.finds {
				if !strings.Contains(got[i], want) {
					t.Errorf("finding %d:\n%s\nwant it to contain\n%s", i, got[i], want)
				}
			}
		})
	}
}

// TestStatusExplain: a failing call's note names the ranks it waited on
// first, then the others that are not well, never itself.
func TestStatusExplain(t *testing.T) {
	cs := classify("c0ffee", 4, "addr", testEvery, fakeViews([]fake{
		{calls: 3, state: recFailed, ago: 2 * time.Second, broken: true},
		{calls: 3, state: recRunning, ago: 2 * time.Second, heard: 50 * time.Millisecond},
		{calls: 2, state: recDone, ago: 2 * time.Second},
		{calls: 2, state: recDone, ago: 2 * time.Second, lost: "its heartbeat connection was reset", pidGone: true, heard: time.Second},
	}), false)
	got := cs.explain([]int{3, 1}, 0)
	want := "waited on rank 3 dead (its heartbeat connection was reset, and pid 1003 is gone; its last heartbeat, 1.0 s ago, said: idle after all_reduce #2 for 2.0 s), " +
		"rank 1 ok (in all_reduce #3 step 1/2 for 2.0 s, heard 0.1 s ago); also rank 2 stalled (idle after all_reduce #2 for 2.0 s, heard 0.0 s ago)"
	if got != want {
		t.Errorf("explain:\n%s\nwant\n%s", got, want)
	}
}

// TestStatusText: the text form has NCCL RAS's shape: the table of
// communicators, then the errors and warnings naming outliers; verbose
// adds every rank.
func TestStatusText(t *testing.T) {
	cs := classify("c0ffee", 3, "10.0.0.1:4000", testEvery, fakeViews([]fake{
		{calls: 3, state: recRunning, ago: 2 * time.Second},
		{calls: 3, state: recRunning, ago: 2 * time.Second},
		{calls: 2, state: recDone, ago: 2 * time.Second},
	}), false)
	st := Status{Time: time.Unix(0, 0).UTC(), Host: "h", PID: 7, Comms: []CommStatus{cs,
		{ID: "abc", Size: 4, Service: "10.0.0.2:5000", Remote: true, State: "RUNNING", Ranks: []RankStatus{{Rank: 2, Health: healthUnclassify}}}}}
	var b strings.Builder
	st.WriteText(&b, false)
	for _, want := range []string{
		"#c0ffee                 3          2-3   RUNNING  STALLED\n",
		"#abc                    4            0   RUNNING  -\n",
		"  #abc: rank 2 here; its status is at rank 0's service, 10.0.0.2:5000\n",
		"Errors\n======\n\n#c0ffee STALLED\n  rank 2 (pid 1002 on h) is stalled: idle after all_reduce #2 for 2.0 s; past it: ranks 0,1 in all_reduce #3 step 1/2\n",
		"Warnings\n========\n\n#c0ffee COUNTS\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text status lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "\nRanks\n") {
		t.Errorf("the ranks' table without verbose:\n%s", b.String())
	}
	b.Reset()
	st.WriteText(&b, true)
	if !strings.Contains(b.String(), "     2     1002 h                stalled           0.0s  idle after all_reduce #2 for 2.0 s [4096 B float sum, ring, LL]") {
		t.Errorf("verbose text lacks rank 2's line:\n%s", b.String())
	}
}

// TestStatusProtocol: the text port's commands, as nc sends them.
func TestStatusProtocol(t *testing.T) {
	ask := func(lines string) string {
		a, b := net.Pipe()
		done := make(chan struct{})
		go func() {
			serveQuery(a, bufio.NewReader(a))
			a.Close()
			close(done)
		}()
		go func() { _, _ = b.Write([]byte(lines)) }()
		var sb strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := b.Read(buf)
			sb.Write(buf[:n])
			if err != nil {
				break
			}
		}
		<-done
		return sb.String()
	}
	if got := ask("status\n"); !strings.HasPrefix(got, "ibex coll status: host ") || !strings.Contains(got, fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("status:\n%s", got)
	}
	if got := ask("VERBOSE STATUS\n"); !strings.HasPrefix(got, "ibex coll status: host ") {
		t.Errorf("VERBOSE STATUS:\n%s", got)
	}
	var st Status
	if got := ask("timeout 5\nset format json\nstatus\n"); json.Unmarshal([]byte(got), &st) != nil || st.PID != os.Getpid() {
		t.Errorf("JSON status:\n%s", got)
	}
	if got := ask("status please now\n"); !strings.HasPrefix(got, "error: unknown command \"status please now\"") {
		t.Errorf("a bad command: %q", got)
	}
	if got := ask("set format xml\n"); !strings.HasPrefix(got, "error: unknown command") {
		t.Errorf("a bad format: %q", got)
	}
}

// TestHeartbeatCodec: a heartbeat encodes a rank's latest record and
// counts and decodes to the same; malformed frames are refused.
func TestHeartbeatCodec(t *testing.T) {
	var r recorder
	r.init(4)
	steps := []execStep{{sends: []xfer{{peer: 1, n: 8}}}, {recvs: []xfer{{peer: 2, n: 8}}}}
	cl := &call{desc: descriptor(algo.Broadcast, algo.Tree, 2, reduce.Float64, reduce.Sum, 3), steps: steps, mode: modeFL,
		info: callInfo{op: recOp(algo.Broadcast), root: 3, bytes: 16}}
	r.begin(cl, 9)
	r.step(1)
	r.fail("it broke")
	b := encodeBeat(nil, &r)
	var bt beat
	if err := decodeBeat(b[5:], &bt); err != nil {
		t.Fatal(err)
	}
	w := bt.rec
	if w.seq != 9 || w.op() != recOp(algo.Broadcast) || w.dtype() != reduce.Float64 || w.algo() != algo.Tree || w.mode() != modeFL ||
		w.steps() != 2 || w.step != 1 || w.root != 3 || w.bytes != 16 || w.state != recFailed || bt.calls != 9 || bt.counts[algo.Broadcast] != 1 ||
		string(bt.errBuf[:bt.errLen]) != "it broke" {
		t.Errorf("decoded %+v (%q)", bt.rec, bt.errBuf[:bt.errLen])
	}
	for _, bad := range [][]byte{b[5:20], append(append([]byte{}, b[5:]...), 'x')} {
		if err := decodeBeat(bad, &bt); err == nil {
			t.Errorf("a malformed heartbeat of %d bytes decoded", len(bad))
		}
	}
	c := &collector{id: "0123456789abcdef", size: 4, ranks: make([]rankSlot, 4)}
	hello := encodeBeatHello(nil, "0123456789abcdef", 2, 4, 5, "h", "id")
	if r, err := c.hello(nil, hello[5:]); err != nil || r != 2 || c.ranks[2].host != "h" {
		t.Errorf("hello: rank %d, %v", r, err)
	}
	for _, h := range [][]byte{
		encodeBeatHello(nil, "fedcba9876543210", 2, 4, 5, "h", "id"), // another communicator
		encodeBeatHello(nil, "0123456789abcdef", 4, 4, 5, "h", "id"), // rank out of range
		encodeBeatHello(nil, "0123456789abcdef", 1, 8, 5, "h", "id"), // another size
		hello[:20],
	} {
		if _, err := c.hello(nil, h[5:]); err == nil {
			t.Errorf("a bad hello was taken")
		}
	}
}

// TestHealthOptions: defaults, the environment, and bad values named.
func TestHealthOptions(t *testing.T) {
	t.Setenv("IBEX_RAS_ADDR", "")
	t.Setenv("IBEX_RAS_HEARTBEAT", "")
	t.Setenv("IBEX_COLL_RECORDS", "")
	t.Setenv("IBEX_COLL_DUMP_DIR", "")
	o, err := HealthOptions{}.withDefaults()
	if err != nil || o.StatusAddr != "localhost:28028" || o.Heartbeat != 200*time.Millisecond || o.Records != 64 || o.DumpDir != "" {
		t.Errorf("defaults: %+v, %v", o, err)
	}
	t.Setenv("IBEX_RAS_ADDR", "127.0.0.1:0")
	t.Setenv("IBEX_RAS_HEARTBEAT", "50ms")
	t.Setenv("IBEX_COLL_RECORDS", "8")
	t.Setenv("IBEX_COLL_DUMP_DIR", "/tmp/x")
	if o, err := (HealthOptions{}).withDefaults(); err != nil || o.StatusAddr != "127.0.0.1:0" || o.Heartbeat != 50*time.Millisecond || o.Records != 8 || o.DumpDir != "/tmp/x" {
		t.Errorf("from the environment: %+v, %v", o, err)
	}
	if o, err := (HealthOptions{StatusAddr: "off", Heartbeat: time.Second, Records: 2}).withDefaults(); err != nil || o.StatusAddr != "off" || o.Heartbeat != time.Second || o.Records != 2 {
		t.Errorf("options over the environment: %+v, %v", o, err)
	}
	for _, tc := range []struct {
		o    HealthOptions
		want string
	}{
		{HealthOptions{Records: -1}, "flight records"},
		{HealthOptions{Records: 1 << 20}, "flight records"},
		{HealthOptions{Heartbeat: time.Microsecond}, "heartbeat"},
		{HealthOptions{StatusAddr: "28028"}, "status address"},
	} {
		if _, err := tc.o.withDefaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", tc.o, err, tc.want)
		}
	}
	t.Setenv("IBEX_RAS_HEARTBEAT", "often")
	if _, err := (HealthOptions{}).withDefaults(); err == nil || !strings.Contains(err.Error(), "IBEX_RAS_HEARTBEAT") {
		t.Errorf("a bad IBEX_RAS_HEARTBEAT: %v", err)
	}
}
