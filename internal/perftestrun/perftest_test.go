package perftestrun

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/perf/oob"
	"github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
)

// Real perftest against real perftest, both on libibexverbs.so, over
// ibex's RoCEv2 between two processes.
func TestPerftestPairs(t *testing.T) {
	lib := Build(t)
	for i, tc := range []struct {
		prog string
		args []string
	}{
		// First, so that the other lane runs the rest meanwhile: perftest
		// itself spends 0.4 s per size (23 of them) outside the data phase.
		{"ib_write_bw", []string{"-a", "-n", "5"}},
		{"ib_write_bw", nil},
		{"ib_read_bw", nil},
		{"ib_send_bw", nil},
		{"ib_atomic_bw", nil},
		{"ib_write_lat", nil},
		{"ib_read_lat", nil},
		{"ib_send_lat", nil},
		{"ib_atomic_lat", nil},
		{"ib_write_bw", []string{"-s", "64"}},
		{"ib_send_bw", []string{"-s", "64"}},
		{"ib_read_bw", []string{"-s", "65536"}},
		{"ib_write_bw", []string{"-q", "2"}},
		{"ib_read_bw", []string{"-q", "2"}},
		{"ib_send_bw", []string{"-q", "2"}},
		{"ib_atomic_bw", []string{"-A", "CMP_AND_SWAP"}},
		{"ib_write_bw", []string{"-b"}},
		{"ib_send_bw", []string{"-e"}},
		{"ib_write_lat", []string{"-s", "64"}},
		{"ib_send_bw", []string{"-D", "1"}}, // duration mode: perftest's SIGALRM in a Go process
	} {
		name := tc.prog + strings.Join(tc.args, "")
		// udp0's addresses of the two processes: a pair per subtest, so
		// that they run in parallel, and not 127.0.0.2 and 127.0.0.3,
		// which other packages' tests use while this one runs.
		net := fmt.Sprintf("127.0.%d.", 80+i)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pair(t, lib, net, tc.prog, tc.args)
		})
	}
}

// pair runs prog as server and client, udp0 on net+"2" and net+"3".
func pair(t *testing.T, lib, net, prog string, extra []string) {
	serverEnv := []string{"IBEX_UDP_ADDR=" + net + "2"}
	clientEnv := []string{"IBEX_UDP_ADDR=" + net + "3"}
	port := strconv.Itoa(FreePort(t))
	args := []string{"--use_old_post_send", "-F", "-d", "udp0", "-p", port, "-n", "200"}
	args = append(args, extra...) // a later -n wins
	server := Start(t, lib, serverEnv, prog, args...)
	var client *Run
	// The server listens once its device is open (its banner saying so
	// stays in its stdio buffer): retry while the client finds no listener.
	for try := 0; ; try++ {
		client = Start(t, lib, clientEnv, prog, append(args, "127.0.0.1")...)
		err := client.Wait(30 * time.Second)
		if err == nil {
			break
		}
		if try < 100 && strings.Contains(client.Output(), "Couldn't connect") {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		t.Fatalf("client: %v", err)
	}
	if err := server.Wait(10 * time.Second); err != nil {
		t.Fatalf("server: %v", err)
	}
	lines := reportLines(client.Output())
	if len(lines) == 0 {
		t.Fatalf("no report in the client's output:\n%s", client.Output())
	}
	if strings.Contains(strings.Join(extra, " "), "-a") && len(lines) != 23 {
		t.Errorf("-a: %d report lines, want 23 (2..2^23 bytes)", len(lines))
	}
	// The bandwidth tests' BW average, the latency tests' t_avg: the last
	// line's (with -a the tiny sizes may print 0.00).
	col := 3
	if strings.HasSuffix(prog, "_lat") {
		col = 5
	}
	last := lines[len(lines)-1]
	if v, err := strconv.ParseFloat(last[col], 64); err != nil || v <= 0 {
		if err == nil && ClockFailed(client.Output()) {
			t.Logf("perftest's clock calibration failed on this loaded machine, so it printed %q: figures not checked", strings.Join(last, " "))
		} else {
			t.Errorf("report %q: column %d is not a positive figure", strings.Join(last, " "), col)
		}
	}
	t.Logf("%s", strings.Join(last, " "))
}

// reportLines are the result lines of perftest's output: those whose first
// two fields are integers (#bytes, #iterations) and that have 5 or more.
func reportLines(out string) [][]string {
	var lines [][]string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		if _, err := strconv.ParseUint(f[0], 10, 64); err != nil {
			continue
		}
		if _, err := strconv.ParseUint(f[1], 10, 64); err != nil {
			continue
		}
		lines = append(lines, f)
	}
	return lines
}

// The library registers perftest's buffers as ibex MRs with their bounds
// and rights: an ibex peer in this process, connected to a real ib_write_bw
// server over RoCEv2, writes into the server's buffer, and gets a remote
// access error when it writes past its end.
func TestPerftestMRBounds(t *testing.T) {
	lib := Build(t)
	if err := udp.AddDevice("udpbounds", netip.MustParseAddrPort("127.0.79.5:0")); err != nil {
		t.Fatal(err)
	}
	port := FreePort(t)
	server := Start(t, lib, []string{"IBEX_UDP_ADDR=127.0.79.4"}, "ib_write_bw",
		"--use_old_post_send", "-F", "-d", "udp0", "-p", strconv.Itoa(port), "-n", "5", "-s", "64")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c *oob.Conn
	var err error
	for {
		if c, err = oob.Dial(ctx, fmt.Sprintf("127.0.0.1:%d", port)); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	e := newIbexEnd(t, "udpbounds", 4096)
	mr, qp, cq := e.mr, e.qp, e.cq
	d := e.connect(t, ctx, c)

	write := func(id, addr uint64) verbs.WC {
		t.Helper()
		if err := qp.PostSend([]verbs.SendWR{{ID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{{Addr: mr.Addr(), Length: 64, LKey: mr.LKey()}}, RemoteAddr: addr, RKey: d.RKey}}); err != nil {
			t.Fatal(err)
		}
		wc := make([]verbs.WC, 1)
		if _, err := cq.PollWait(ctx, wc); err != nil {
			t.Fatal(err)
		}
		return wc[0]
	}
	copy(mr.Bytes(), "written by ibex into perftest's buffer")
	if wc := write(1, d.VAddr); wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE into the server's buffer: %v", wc)
	}
	// perftest's buffer is two cycle buffers of 64 KiB at most: 1 MiB on is
	// outside it.
	if wc := write(2, d.VAddr+1<<20); wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE past the end of the server's buffer: %v, want REM_ACCESS_ERR", wc)
	} else {
		t.Logf("past the end: %v", wc)
	}
	if _, err := c.Finish(ctx, oob.Report{Size: 64, Iters: 5, BWPeak: 1, BWAvg: 1, MsgRateAvg: 1}); err != nil {
		t.Fatal(err)
	}
	if err := server.Wait(10 * time.Second); err != nil {
		t.Fatalf("server: %v", err)
	}
}

// UD is not implemented: perftest is told so (EOPNOTSUPP) and says why.
func TestPerftestUD(t *testing.T) {
	lib := Build(t)
	args := []string{"--use_old_post_send", "-F", "-d", "udp0", "-c", "UD", "-p", strconv.Itoa(FreePort(t))}
	server := Start(t, lib, []string{"IBEX_UDP_ADDR=127.0.79.9"}, "ib_send_bw", args...)
	// The server creates its QPs once a client is connected.
	var client *Run
	for try := 0; try < 100; try++ {
		client = Start(t, lib, []string{"IBEX_UDP_ADDR=127.0.79.10"}, "ib_send_bw", append(args, "127.0.0.1")...)
		_ = client.Wait(10 * time.Second)
		if !strings.Contains(client.Output(), "Couldn't connect") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, r := range []*Run{server, client} {
		if err := r.Wait(10 * time.Second); err == nil || strings.Contains(err.Error(), "still running") {
			t.Errorf("ib_send_bw -c UD: %v, want a failed exit", err)
		}
	}
	if !strings.Contains(server.Output()+client.Output(), "QP type 4 is not supported") {
		t.Errorf("no reason on stderr:\n%s\n%s", server.Output(), client.Output())
	}
}

// Verbs called wrongly (testdata/misuse/misuse.c) fail with libibverbs'
// errno, and bad_wr names the bad request, without crashing the program.
func TestMisuse(t *testing.T) {
	lib := Build(t)
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc")
	}
	prog := filepath.Join(t.TempDir(), "misuse")
	if out, err := exec.Command(gcc, "-Wall", "-o", prog, "testdata/misuse/misuse.c", "-libverbs").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	r := Start(t, lib, []string{"IBEX_UDP_ADDR=127.0.79.6", "FAKEVERBS_TRACE=1"}, prog)
	if err := r.Wait(20 * time.Second); err != nil {
		t.Fatalf("%v\n%s", err, r.Output())
	}
	if n := strings.Count(r.Output(), "\nok "); n < 30 || strings.Contains(r.Output(), "FAIL") {
		t.Fatalf("%d checks passed:\n%s", n, r.Output())
	}
	// The library's signal() (abi.c) adds SA_ONSTACK to perftest's
	// SIGALRM handlers.
	if !strings.Contains(r.Output(), "ok signal sets SA_ONSTACK") {
		t.Errorf("no SA_ONSTACK check passed:\n%s", r.Output())
	}
}

// perftest's WRITEs land where it was told: a real ib_write_bw client
// writes into the MR of an ibex server in this process.
func TestPerftestWritesLand(t *testing.T) {
	lib := Build(t)
	if err := udp.AddDevice("udpland", netip.MustParseAddrPort("127.0.79.7:0")); err != nil {
		t.Fatal(err)
	}
	ln, err := oob.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	client := Start(t, lib, []string{"IBEX_UDP_ADDR=127.0.79.8"}, "ib_write_bw",
		"--use_old_post_send", "-F", "-d", "udp0", "-p", strconv.Itoa(port), "-n", "5", "-s", "64", "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const size = 128 << 10 // perftest writes within two cycle buffers
	e := newIbexEnd(t, "udpland", size)
	mem := e.mr.Bytes()
	for i := range mem {
		mem[i] = 0xa5
	}
	e.connect(t, ctx, c)
	// The passive server goes from Ready to Finish, which returns once the
	// client's WRITEs have completed (it sends its report then).
	rep, err := c.Finish(ctx, oob.Report{})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Wait(10 * time.Second); err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Logf("client's report %+v", rep)
	if rep.Iters != 5 || rep.Size != 64 {
		t.Errorf("report %+v, want 5 iterations of 64 bytes", rep)
	}
	if bytes.Count(mem[:64], []byte{0xa5}) == 64 {
		t.Fatalf("the first 64 bytes of the MR were not written: % x", mem[:64])
	}
	if n := bytes.Count(mem[4096:], []byte{0xa5}); n != len(mem)-4096 {
		t.Errorf("%d bytes written beyond the first 4 KiB", len(mem)-4096-n)
	}
}

// ibexEnd is an ibex QP with one MR on device dev (opened in this process),
// the other end of a real perftest program; destroyed when t ends.
type ibexEnd struct {
	pa verbs.PortAttr
	mr *verbs.MR
	cq *verbs.CQ
	qp *verbs.QP
}

func newIbexEnd(t *testing.T, dev string, mrSize int) *ibexEnd {
	t.Helper()
	vc, err := verbs.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vc.Close() })
	pd, err := vc.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pd.Dealloc() })
	e := &ibexEnd{}
	if e.mr, err = pd.AllocMR(mrSize, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.mr.Dereg() })
	if e.cq, err = vc.CreateCQ(16); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.cq.Destroy() })
	if e.qp, err = pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.qp.Destroy() })
	if e.pa, err = vc.QueryPort(1); err != nil {
		t.Fatal(err)
	}
	return e
}

// connect runs perftest's exchange for a 64-byte write_bw of 5 iterations
// over c and connects the QP to the peer's, up to Ready; it returns the
// peer's dest.
func (e *ibexEnd) connect(t *testing.T, ctx context.Context, c *oob.Conn) oob.Dest {
	t.Helper()
	local := oob.Params{MTU: 4096, Test: oob.Test{Name: oob.WriteBW, QPs: 1, Size: 64, Iters: 5}}
	remote, err := c.Handshake(ctx, local)
	if err != nil {
		t.Fatal(err)
	}
	p := oob.Negotiate(local, remote)
	dests, err := c.ExchangeDests(ctx, []oob.Dest{{OutReads: 1, QPN: e.qp.Num(), PSN: e.qp.InitialPSN(),
		RKey: e.mr.RKey(), VAddr: e.mr.Addr(), GID: e.pa.GID}})
	if err != nil {
		t.Fatal(err)
	}
	d := dests[0]
	mtu, _ := verbs.MTUFromBytes(p.MTU)
	if err := e.qp.Connect(verbs.ConnInfo{QPN: d.QPN, PSN: d.PSN, GID: d.GID, MTU: mtu}, verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	return d
}
