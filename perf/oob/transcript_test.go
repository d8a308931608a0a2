package oob

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The transcripts in testdata are perftest 4.5's side of the exchange, byte
// for byte (testdata/gen.py writes them from perftest's format strings). A
// scripted peer plays perftest's role from a transcript, as client or as
// server, and checks every byte our Conn sends.

type line struct {
	client bool   // sent by the client
	flag   byte   // 0, 'v' (version: ibex adds its marker), '?' (any bytes from ibex)
	msg    []byte // what perftest sends
	note   string // the perftest function (the "# ^" line after it)
}

type transcript struct {
	name  string
	scen  map[string]int
	lines []line
}

func loadTranscript(t testing.TB, path string) transcript {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := transcript{name: filepath.Base(path), scen: map[string]int{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		s := sc.Text()
		switch {
		case strings.HasPrefix(s, "#!"):
			for _, kv := range strings.Fields(s[2:]) {
				k, v, _ := strings.Cut(kv, "=")
				if i, err := strconv.Atoi(v); err == nil {
					tr.scen[k] = i
				} else {
					tr.scen[k+"="+v] = 1
				}
			}
		case strings.HasPrefix(s, "# ^"):
			if len(tr.lines) > 1 {
				tr.lines[len(tr.lines)-1].note = s[4:]
				tr.lines[len(tr.lines)-2].note = s[4:]
			}
		case s == "" || s[0] == '#':
		default:
			head, rest, _ := strings.Cut(s, " ")
			if head == "" || (head[0] != 'C' && head[0] != 'S') || len(head) > 2 {
				t.Fatalf("%s:%d: bad line %q", path, n, s)
			}
			l := line{client: head[0] == 'C'}
			if len(head) == 2 {
				l.flag = head[1]
			}
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				t.Fatalf("%s:%d: %v", path, n, err)
			}
			u, _ := strconv.Unquote(q)
			l.msg = []byte(u)
			tr.lines = append(tr.lines, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return tr
}

// playPerftest plays the perftest end (client or server) of tr on nc.
func playPerftest(nc net.Conn, tr transcript, asClient bool) error {
	for i, l := range tr.lines {
		if l.client == asClient {
			if _, err := nc.Write(l.msg); err != nil {
				return fmt.Errorf("line %d (%s): write: %v", i, l.note, err)
			}
			continue
		}
		got := make([]byte, len(l.msg))
		if _, err := io.ReadFull(nc, got); err != nil {
			return fmt.Errorf("line %d (%s): read %d bytes: %v", i, l.note, len(got), err)
		}
		want := l.msg
		switch l.flag {
		case '?':
			continue
		case 'v':
			want = bytes.Clone(l.msg)
			copy(want[5:], "ibex\x01")
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("line %d (%s): ibex sent %q, perftest sends %q", i, l.note, got, want)
		}
	}
	// perftest's ctx_close_connection closes; so must we (or, for
	// ib_write_lat, just exit).
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := nc.Read(make([]byte, 1)); err != io.EOF {
		return fmt.Errorf("after the transcript: want EOF, got %d bytes, %v", n, err)
	}
	return nil
}

// The inputs that produce the transcripts (gen.py uses the same).
func testDest(client bool, i int, gid bool) Dest {
	d := Dest{OutReads: 16, QPN: 0x200 + uint32(i), PSN: 0x200000 + uint32(i)*0x111,
		RKey: 0x5e000000 + uint32(i), VAddr: 0x7e0000002000 + uint64(i)*0x10000,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 2}}
	if client {
		d = Dest{OutReads: 16, QPN: 0x100 + uint32(i), PSN: 0x100000 + uint32(i)*0x111,
			RKey: 0xc1000000 + uint32(i), VAddr: 0x7f0000001000 + uint64(i)*0x10000,
			GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 1}}
	}
	if !gid {
		d.GID = [16]byte{}
	}
	return d
}

var (
	clientReport = Report{Size: 65536, Iters: 5000, BWPeak: 11250.5, BWAvg: 11200.25, MsgRateAvg: 0.179204}
	serverReport = Report{Size: 65536, Iters: 5000, BWPeak: 10000.5, BWAvg: 9999.75, MsgRateAvg: 0.16}
)

func scenarioParams(tr transcript, client bool) Params {
	name := ""
	for k := range tr.scen {
		if v, ok := strings.CutPrefix(k, "test="); ok {
			name = v
		}
	}
	p := Params{CycleBuffer: 4096, CacheLineSize: 128, MTU: 1024}
	if client {
		p.CacheLineSize, p.MTU = 64, 4096
	}
	if tr.scen["gid"] == 0 {
		p.GIDIndex = -1
	}
	p.Test = Test{Name: name, Size: 65536, Iters: 5000, QPs: tr.scen["qps"], Duplex: tr.scen["duplex"] == 1,
		AllSizes: tr.scen["all"] == 1, Duration: tr.scen["duration"]}
	return p
}

// runIbex drives one ibex end through a whole test as `ibex perf` would,
// with the dests and reports of testDest and clientReport/serverReport.
func runIbex(ctx context.Context, c *Conn, p Params) (remote Params, dests []Dest, reports []Report, err error) {
	return runIbexWith(ctx, c, p, nil, nil)
}

// runIbexWith is runIbex with given dests and reports (one per exchange, in
// order; the last one repeats).
func runIbexWith(ctx context.Context, c *Conn, p Params, local []Dest, mine []Report) (remote Params, dests []Dest, reports []Report, err error) {
	client := !c.IsServer()
	if remote, err = c.Handshake(ctx, p); err != nil {
		return
	}
	if local == nil {
		local = make([]Dest, p.Test.QPs)
		for i := range local {
			local[i] = testDest(client, i, p.GIDIndex != -1)
		}
	}
	if mine == nil {
		mine = []Report{serverReport}
		if client {
			mine = []Report{clientReport}
		}
	}
	next := func() Report {
		r := mine[0]
		if len(mine) > 1 {
			mine = mine[1:]
		}
		return r
	}
	if dests, err = c.ExchangeDests(ctx, local); err != nil {
		return
	}
	if err = c.Ready(ctx); err != nil {
		return
	}
	runs := 1
	if p.Test.AllSizes && p.Test.Name != AtomicBW {
		runs = 23
	}
	for range runs {
		if err = c.StartRun(ctx); err != nil {
			return
		}
		r, ok, e := c.EndRun(ctx, mine[0])
		if err = e; err != nil {
			return
		}
		if ok {
			next()
			reports = append(reports, r)
		}
	}
	r, err := c.Finish(ctx, next())
	if err == nil && r != (Report{}) {
		reports = append(reports, r)
	}
	return
}

func TestTranscripts(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no transcripts")
	}
	for _, f := range files {
		tr := loadTranscript(t, f)
		for _, ibexClient := range []bool{true, false} {
			role := "ibex-server"
			if ibexClient {
				role = "ibex-client"
			}
			t.Run(tr.name+"/"+role, func(t *testing.T) {
				testTranscript(t, tr, ibexClient)
			})
		}
	}
}

func testTranscript(t *testing.T, tr transcript, ibexClient bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	peerErr := make(chan error, 1)
	var c *Conn
	if ibexClient {
		go func() {
			nc, err := ln.ln.Accept()
			if err != nil {
				peerErr <- err
				return
			}
			defer nc.Close()
			peerErr <- playPerftest(nc, tr, false)
		}()
		if c, err = Dial(ctx, ln.Addr().String()); err != nil {
			t.Fatal(err)
		}
	} else {
		go func() {
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				peerErr <- err
				return
			}
			defer nc.Close()
			peerErr <- playPerftest(nc, tr, true)
		}()
		if c, err = ln.Accept(ctx); err != nil {
			t.Fatal(err)
		}
	}
	defer c.Close()

	p := scenarioParams(tr, ibexClient)
	remote, dests, reports, err := runIbex(ctx, c, p)
	if perr := <-peerErr; perr != nil {
		t.Errorf("perftest side: %v", perr)
	}
	if err != nil {
		t.Fatalf("ibex side: %v", err)
	}

	other := scenarioParams(tr, !ibexClient)
	want := Params{Version: "6.06", CycleBuffer: other.CycleBuffer, CacheLineSize: other.CacheLineSize, MTU: other.MTU}
	if remote != want {
		t.Errorf("remote params %+v, want %+v", remote, want)
	}
	if n := Negotiate(p, remote); n.MTU != 1024 || n.CacheLineSize != 128 || n.CycleBuffer != 4096 {
		t.Errorf("negotiated %+v, want MTU 1024, cache line 128, cycle buffer 4096", n)
	}
	for i, d := range dests {
		if w := testDest(!ibexClient, i, p.GIDIndex != -1); d != w {
			t.Errorf("remote dest %d: %v, want %v", i, d, w)
		}
	}
	if len(dests) != p.Test.QPs {
		t.Errorf("%d remote dests, want %d", len(dests), p.Test.QPs)
	}
	// Reports: per run when bidirectional; at the end the server gets the
	// client's when unidirectional.
	wantReport := serverReport
	if !ibexClient {
		wantReport = clientReport
	}
	for i, r := range reports {
		if ibexClient && !p.Test.Duplex {
			continue // the perftest server's report is garbage
		}
		if r != wantReport {
			t.Errorf("report %d: %+v, want %+v", i, r, wantReport)
		}
	}
}
