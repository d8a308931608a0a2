package verbs_test

import (
	"testing"
	"unsafe"

	"github.com/ibex-rdma/ibex/verbs"
)

// TestAllocMRAddrs: the regions AllocMR makes have random page-aligned
// addresses that are not their memory's, so one tells nothing of its
// neighbours' (consecutive allocations from one pool would); RegMR keeps
// libibverbs' rule, the buffer's virtual address. A WRITE between two
// AllocMR regions, named by those addresses, lands.
func TestAllocMRAddrs(t *testing.T) {
	a, err := open("loop0", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	const n = 16
	var prev uint64
	steps := map[int64]int{}
	for i := range n {
		mr, err := a.pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		defer mr.Dereg()
		addr, mem := mr.Addr(), uint64(uintptr(unsafe.Pointer(&mr.Bytes()[0])))
		if addr&0xfff != 0 || addr < 1<<32 || addr == mem {
			t.Fatalf("AllocMR %d: address %#x (memory at %#x): want a page-aligned iova of its own above 4 GiB", i, addr, mem)
		}
		if i > 0 {
			steps[int64(addr)-int64(prev)]++
		}
		prev = addr
	}
	for d, k := range steps {
		if k > 1 {
			t.Errorf("%d of %d consecutive AllocMR addresses differ by %d", k, n-1, d)
		}
	}
	if mem := uint64(uintptr(unsafe.Pointer(&a.mr.Bytes()[0]))); a.mr.Addr() != mem {
		t.Errorf("RegMR address %#x, buffer at %#x: want the buffer's virtual address", a.mr.Addr(), mem)
	}

	// One-sided traffic names AllocMR memory by its iova.
	b, err := open("loop0", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if err := a.qp.Connect(b.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	src, err := a.pd.AllocMR(64, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Dereg()
	dst, err := b.pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Dereg()
	copy(src.Bytes()[8:], "iova ok!")
	w := verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL:        []verbs.SGE{{Addr: src.Addr() + 8, Length: 8, LKey: src.LKey()}},
		RemoteAddr: dst.Addr() + 100, RKey: dst.RKey()}
	if err := a.qp.PostSend([]verbs.SendWR{w}); err != nil {
		t.Fatal(err)
	}
	if wc, err := a.wait(); err != nil || wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE: %v %v", wc.Status, err)
	}
	if got := string(dst.Bytes()[100:108]); got != "iova ok!" {
		t.Errorf("WRITE placed %q at iova+100, want %q", got, "iova ok!")
	}
}
