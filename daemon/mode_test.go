package daemon_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/verbs"
)

func ibexdListed() bool {
	for _, d := range verbs.Devices() {
		if d.Provider == "ibexd" && d.Device == "udp0" {
			return true
		}
	}
	return false
}

// TestMode: with no daemon answering, the ibexd provider lists nothing
// and everything runs in-process; with one, ibexd/udp0 is listed and
// verbs.Open("udp0") takes it; IBEX_DAEMON=off ignores it.
func TestMode(t *testing.T) {
	t.Setenv("IBEX_DAEMON_SOCKET", filepath.Join(t.TempDir(), "none.sock"))
	if ibexdListed() {
		t.Fatal("ibexd/udp0 listed with no daemon")
	}
	startDaemon(t, "127.0.0.50")
	if !ibexdListed() {
		t.Fatal("ibexd/udp0 not listed with a daemon running")
	}
	ctx, err := verbs.Open("udp0")
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Provider() != "ibexd" || !ctx.QueryDevice().Caps.Has(verbs.CapAllocatedMemory) {
		t.Errorf("udp0 opened on provider %s with caps %v; want ibexd with ALLOCATED_MEMORY", ctx.Provider(), ctx.QueryDevice().Caps)
	}
	ctx.Close()
	t.Setenv("IBEX_DAEMON", "off")
	if ibexdListed() {
		t.Error("ibexd/udp0 listed with IBEX_DAEMON=off")
	}
}

// TestRegMROrdinaryMemory: memory the daemon cannot map is refused at
// RegMR, saying what to use instead; Context.AllocBuf's is registered.
func TestRegMROrdinaryMemory(t *testing.T) {
	startDaemon(t, "127.0.0.51")
	ctx, err := verbs.Open("ibexd/udp0")
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	defer pd.Dealloc()
	_, err = pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	if !errors.Is(err, verbs.ErrUnsupported) || !strings.Contains(err.Error(), "PD.AllocMR") {
		t.Errorf("RegMR of Go memory: %v; want ErrUnsupported naming PD.AllocMR", err)
	}
	buf, free, err := ctx.AllocBuf(8192)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(buf[4096:], verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatalf("RegMR of AllocBuf memory: %v", err)
	}
	if mr.Addr() == 0 || mr.RKey() == 0 || mr.LKey() == mr.RKey() {
		t.Errorf("mr addr %#x lkey %#x rkey %#x", mr.Addr(), mr.LKey(), mr.RKey())
	}
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	free()
}
