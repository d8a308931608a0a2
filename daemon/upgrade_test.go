package daemon_test

import (
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/provider/ibexd"
	"github.com/ibex-rdma/ibex/verbs"
)

// TestUpgrade: while a process streams WRITEs and SENDs between two QPs
// through the daemon, a new `ibex daemon --takeover` takes over: the old
// one exits 0, the new one serves the same socket, QPs, keys and memory,
// and the process sees no error, no lost and no repeated completion. The
// longest gap between two completions (the blackout) is logged.
func TestUpgrade(t *testing.T) { testUpgrade(t, startDaemon(t, "127.0.0.48"), "127.0.0.48", false) }

// TestUpgradePSP is TestUpgrade on a device that requires encryption: the
// old daemon's SAs go to the new one (udp.FrozenPSP, RestorePSP), which
// goes on sealing under them, with later IVs; nothing is lost.
func TestUpgradePSP(t *testing.T) {
	key := filepath.Join(t.TempDir(), "psp.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("a7", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemonConfig(t, "", "127.0.0.98", "devices:\n  - {name: udp0, address: 127.0.0.98, psp: required, psp_key: "+key+"}\n")
	testUpgrade(t, d, "127.0.0.98", true)
}

func testUpgrade(t *testing.T, d *testDaemon, addr string, sealed bool) {
	a, b := openEnd(t, 1<<16), openEnd(t, 1<<16)
	if sealed != (a.qp.Info().SPI != 0) {
		t.Fatalf("spi %#x: want encryption %v", a.qp.Info().SPI, sealed)
	}
	if err := a.qp.Connect(b.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	const slots = 512
	// b's receives: 32 posted, reposted as they complete.
	recvBuf := uint64(slots * 8)
	postRecv := func(id uint64) {
		if err := b.qp.PostRecv([]verbs.RecvWR{{ID: id, SGL: []verbs.SGE{{Addr: b.mr.Addr() + recvBuf + (id%32)*64, Length: 64, LKey: b.mr.LKey()}}}}); err != nil {
			t.Error(err)
		}
	}
	for i := range uint64(32) {
		postRecv(i)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var sendErr, recvErr error
	var writes, sends, recvd uint64
	var sendGap, recvGap time.Duration
	senderDone := make(chan struct{})
	wg.Add(2)
	go func() { // a: WRITE slot i%512 = i, and every 4th a SEND carrying i
		defer wg.Done()
		defer close(senderDone)
		wc := make([]verbs.WC, 16)
		last := time.Now()
		out := 0
		for i := uint64(0); ctx.Err() == nil || out > 0; i++ {
			if ctx.Err() == nil && out < 64 {
				binary.LittleEndian.PutUint64(a.mr.Bytes()[(i%slots)*8:], i)
				wr := verbs.SendWR{ID: i, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
					SGL:        []verbs.SGE{{Addr: a.mr.Addr() + (i%slots)*8, Length: 8, LKey: a.mr.LKey()}},
					RemoteAddr: b.mr.Addr() + (i%slots)*8, RKey: b.mr.RKey()}
				if i%4 == 3 {
					wr.Opcode, wr.Imm = verbs.WRSendWithImm, uint32(sends)
					wr.RemoteAddr, wr.RKey = 0, 0
					sends++
				} else {
					writes++
				}
				if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
					sendErr = err
					return
				}
				out++
				continue
			}
			wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
			n, err := a.cq.PollWait(wctx, wc)
			wcancel()
			if err != nil {
				sendErr = err
				return
			}
			now := time.Now()
			sendGap = max(sendGap, now.Sub(last))
			last = now
			for _, w := range wc[:n] {
				if w.Status != verbs.WCSuccess {
					sendErr = &wcError{w}
					return
				}
			}
			out -= n
		}
	}()
	go func() { // b: receives arrive in order, each once
		defer wg.Done()
		wc := make([]verbs.WC, 16)
		last := time.Now()
		for {
			select {
			case <-senderDone:
				if recvd == sends {
					return // every SEND the sender completed has arrived
				}
			default:
			}
			wctx, wcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			n, err := b.cq.PollWait(wctx, wc)
			wcancel()
			if err != nil {
				if time.Since(last) > 20*time.Second {
					recvErr = err
					return
				}
				continue
			}
			now := time.Now()
			recvGap = max(recvGap, now.Sub(last))
			last = now
			for _, w := range wc[:n] {
				if w.Status != verbs.WCSuccess || w.Opcode != verbs.WCRecv || w.Imm != uint32(recvd) {
					recvErr = &wcError{w}
					return
				}
				recvd++
				postRecv(w.WRID + 32)
			}
		}
	}()

	time.Sleep(100 * time.Millisecond) // traffic before the upgrade
	oldPID := d.cmd.Process.Pid
	next := exec.Command(ibexBin, "daemon", "--takeover", "--socket", d.sock)
	next.Env = append(os.Environ(), "IBEX_UDP_ADDR="+addr, "IBEX_DAEMON=off")
	next.Stderr = os.Stderr
	if err := next.Start(); err != nil {
		t.Fatal(err)
	}
	nextExit := make(chan error, 1)
	go func() { nextExit <- next.Wait() }()
	select {
	case err := <-d.exit:
		d.done = true
		if err != nil {
			t.Fatalf("the old daemon exited: %v", err)
		}
	case err := <-nextExit:
		t.Fatalf("the new daemon exited before it took over: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the old daemon did not exit within 30 s of the takeover")
	}
	// From here the new daemon is the one to stop at cleanup.
	d.cmd, d.exit, d.done = next, nextExit, false
	st, err := ibexd.QueryStatus(d.sock, 5*time.Second)
	if err != nil {
		t.Fatalf("the new daemon does not answer: %v", err)
	}
	if st.PID == oldPID || st.PID != next.Process.Pid {
		t.Fatalf("status from pid %d; want the new daemon %d", st.PID, next.Process.Pid)
	}
	time.Sleep(200 * time.Millisecond) // traffic after the upgrade
	cancel()
	wg.Wait()
	if sendErr != nil || recvErr != nil {
		t.Fatalf("across the upgrade: sender %v, receiver %v", sendErr, recvErr)
	}
	if recvd != sends {
		t.Errorf("%d SENDs completed, %d received", sends, recvd)
	}
	for i := uint64(0); i < slots && i < writes+sends; i++ {
		if i%4 == 3 {
			continue // a SEND's slot: never written
		}
		got := binary.LittleEndian.Uint64(b.mr.Bytes()[i*8:])
		if got%slots != i {
			t.Errorf("slot %d holds %d", i, got)
		}
	}
	if len(st.Clients) != 2 {
		t.Errorf("the new daemon serves %d contexts, want 2", len(st.Clients))
	}
	t.Logf("upgrade: %d WRITEs and %d SENDs; longest gap between completions: %v at the sender, %v at the receiver",
		writes, sends, sendGap.Round(time.Microsecond), recvGap.Round(time.Microsecond))
	// Control verbs still work against the new daemon.
	mr, err := a.pd.AllocMR(4096, allAccess)
	if err != nil {
		t.Fatalf("alloc mr after the upgrade: %v", err)
	}
	if err := mr.Dereg(); err != nil {
		t.Errorf("dereg mr after the upgrade: %v", err)
	}
}

type wcError struct{ wc verbs.WC }

func (e *wcError) Error() string { return "completion " + e.wc.String() }
