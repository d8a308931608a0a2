package daemon_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// TestDaemonPSP: a daemon device with psp: required encrypts the QPs of
// attached processes: their Info announces the daemon QP's SPI, the
// peer's reaches the daemon with the move to RTR, a WRITE lands intact and
// no packet is dropped by an SA check; a peer that announces no SPI is
// refused, naming the policy.
func TestDaemonPSP(t *testing.T) {
	key := filepath.Join(t.TempDir(), "psp.key")
	if err := os.WriteFile(key, []byte("1:"+strings.Repeat("9e", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	startDaemonConfig(t, "", "127.0.0.99", "devices:\n  - {name: udp0, address: 127.0.0.99, psp: required, psp_key: "+key+"}\n")
	a, b := openEnd(t, 4096), openEnd(t, 4096)
	ia, ib := a.qp.Info(), b.qp.Info()
	if ia.SPI == 0 || ib.SPI == 0 || ia.SPI>>31 != 1 {
		t.Fatalf("spis %#x %#x: want the daemon's, of generation 1", ia.SPI, ib.SPI)
	}
	if err := a.qp.Connect(ib, verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(ia, verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	copy(a.mr.Bytes(), "sealed!!")
	w := verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: a.mr.Addr(), Length: 4096, LKey: a.mr.LKey()}}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	if err := a.qp.PostSend([]verbs.SendWR{w}); err != nil {
		t.Fatal(err)
	}
	wc := make([]verbs.WC, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if n, err := a.cq.PollWait(ctx, wc); err != nil || n != 1 || wc[0].Status != verbs.WCSuccess {
		t.Fatalf("WRITE: %v %v", wc[0], err)
	}
	if !bytes.Equal(a.mr.Bytes(), b.mr.Bytes()) {
		t.Fatal("WRITE: data differs")
	}
	pcs, err := a.ctx.PortCounters(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range pcs {
		if strings.HasPrefix(c.Name, "PSP") && c.Value != 0 {
			t.Errorf("daemon port counter %s = %d", c.Name, c.Value)
		}
	}
	if k := slices.IndexFunc(pcs, func(c verbs.PortCounter) bool { return c.Name == "PSPAuthErrors" }); k < 0 {
		t.Errorf("daemon port counters %v: no PSPAuthErrors", pcs)
	}
	c := openEnd(t, 4096)
	plain := a.qp.Info()
	plain.SPI = 0
	if err := c.qp.Connect(plain, verbs.ConnectOptions{}); err == nil || !strings.Contains(err.Error(), "encryption required (policy required") {
		t.Fatalf("connect to a peer without SPI: %v", err)
	}
}
