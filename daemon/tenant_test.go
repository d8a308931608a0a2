package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

const tenantsYAML = `
tenants:
  - name: blue
    match:
      uids: [1001, 1002]
    partitions: ["0x8001", default]
    quotas:
      max_qps: 8
      max_memory: 1M
      rate: 100M
  - name: red
    match:
      gids: [2000]
      cgroups: [/red.slice]
  - name: rest
default_tenant: rest
`

func TestTenantConfig(t *testing.T) {
	c, err := ParseConfig([]byte(tenantsYAML))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tenants) != 3 || c.Tenants[0].Quotas.MaxQPs != 8 || c.Tenants[0].Partitions[0] != "0x8001" || c.DefaultTenant != "rest" {
		t.Fatalf("parsed %+v", c)
	}
	for _, tc := range []struct {
		name string
		yaml string
		want []string
	}{
		{"no name", "tenants:\n  - match: {uids: [1]}\n", []string{"tenants[0].name: missing", "line 2"}},
		{"bad name", "tenants:\n  - name: Blue!\n    match: {uids: [1]}\n", []string{"tenants[0].name", `"Blue!" is not a tenant name`}},
		{"dup", "tenants:\n  - name: a\n    match: {uids: [1]}\n  - name: a\n    match: {uids: [2]}\n", []string{"tenants[1].name", "also the name of tenants[0]"}},
		{"no match", "tenants:\n  - name: a\n", []string{"tenants[0].match", "would take no process"}},
		{"uid", "tenants:\n  - name: a\n    match: {uids: [-1]}\n", []string{"tenants[0].match.uids[0]", "not a user id", "line 3"}},
		{"cgroup", "tenants:\n  - name: a\n    match: {cgroups: [red.slice]}\n", []string{"tenants[0].match.cgroups[0]", "not a cgroup path"}},
		{"cgroup clean", "tenants:\n  - name: a\n    match: {cgroups: [/red/]}\n", []string{"tenants[0].match.cgroups[0]", `want "/red"`}},
		{"pkey", "tenants:\n  - name: a\n    match: {uids: [1]}\n    partitions: [\"0x8000\"]\n", []string{"tenants[0].partitions[0]", "reserved"}},
		{"pkey big", "tenants:\n  - name: a\n    match: {uids: [1]}\n    partitions: [\"0x18001\"]\n", []string{"tenants[0].partitions[0]", "not a P_Key"}},
		{"partition name", "tenants:\n  - name: a\n    match: {uids: [1]}\n    partitions: [\"a b\"]\n", []string{"tenants[0].partitions[0]", "neither a P_Key nor a partition name"}},
		{"quota", "tenants:\n  - name: a\n    match: {uids: [1]}\n    quotas: {max_qps: -1}\n", []string{"tenants[0].quotas.max_qps", "negative"}},
		{"clients", "tenants:\n  - name: a\n    match: {uids: [1]}\n    quotas: {max_clients: -2}\n", []string{"tenants[0].quotas.max_clients", "negative"}},
		{"memory", "tenants:\n  - name: a\n    match: {uids: [1]}\n    quotas: {max_memory: lots}\n", []string{"tenants[0].quotas.max_memory", `"lots"`}},
		{"burst alone", "tenants:\n  - name: a\n    match: {uids: [1]}\n    quotas: {burst: 1M}\n", []string{"tenants[0].quotas.burst", "without a rate"}},
		{"unknown field", "tenants:\n  - name: a\n    match: {uid: [1]}\n", []string{"uid", "line 3"}},
		{"default unknown", "tenants:\n  - name: a\n    match: {uids: [1]}\ndefault_tenant: b\n", []string{"default_tenant", `"b" is not the name`}},
		{"default alone", "default_tenant: b\n", []string{"default_tenant", "no tenants are configured"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.yaml))
			checkConfigErr(t, err, tc.want...)
		})
	}
}

// TestTenantOf: the policy as a pure function of the kernel's identity.
func TestTenantOf(t *testing.T) {
	c, err := ParseConfig([]byte(tenantsYAML))
	if err != nil {
		t.Fatal(err)
	}
	strict := c
	strict.Tenants = c.Tenants[:2]
	strict.DefaultTenant = ""
	for _, tc := range []struct {
		id     Identity
		want   string // "" refused by strict
		strict string
	}{
		{Identity{UID: 1001, GID: 5}, "blue", "blue"},
		{Identity{UID: 1002, GID: 2000, Cgroup: "/red.slice"}, "blue", "blue"}, // first match wins
		{Identity{UID: 7, GID: 2000, Cgroup: "/red.slice"}, "red", "red"},
		{Identity{UID: 7, GID: 2000, Cgroup: "/red.slice/job/1"}, "red", "red"},
		{Identity{UID: 7, GID: 2000, Cgroup: "/red.slicer"}, "rest", ""},                          // not below /red.slice
		{Identity{UID: 7, GID: 2001, Cgroup: "/red.slice"}, "rest", ""},                           // both kinds must match
		{Identity{UID: 7, GID: 2001, Groups: []int{5, 2000}, Cgroup: "/red.slice"}, "red", "red"}, // a supplementary group
		{Identity{UID: 7, GID: 2000}, "rest", ""},                                                 // no cgroup known
		{Identity{UID: 0, GID: 0, Cgroup: "/"}, "rest", ""},
	} {
		got, ok := c.TenantOf(tc.id)
		if !ok || got != tc.want {
			t.Errorf("TenantOf(%v) = %q, %v; want %q", tc.id, got, ok, tc.want)
		}
		got, ok = strict.TenantOf(tc.id)
		if got != tc.strict || ok != (tc.strict != "") {
			t.Errorf("without default_tenant, TenantOf(%v) = %q, %v; want %q", tc.id, got, ok, tc.strict)
		}
	}
	var none Config
	if got, ok := none.TenantOf(Identity{UID: 12345}); !ok || got != ImplicitTenant {
		t.Errorf("with no tenants: %q, %v; want the implicit %q", got, ok, ImplicitTenant)
	}
}

func TestParseCgroup(t *testing.T) {
	for in, want := range map[string]string{
		"0::/user.slice/user-0.slice/session-1.scope\n":               "/user.slice/user-0.slice/session-1.scope",
		"12:memory:/docker/abc\n1:name=systemd:/x\n0::/kubepods/p1\n": "/kubepods/p1",
		"12:memory:/docker/abc\n":                                     "",
		"":                                                            "",
	} {
		if got := parseCgroup([]byte(in)); got != want {
			t.Errorf("parseCgroup(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTenantQuota(t *testing.T) {
	tn := newTenant(&Config{}, &TenantConfig{Name: "blue", Quotas: Quotas{MaxQPs: 2, MaxMemory: "4K"}})
	for range 2 {
		if err := tn.take(resQP, 1); err != nil {
			t.Fatal(err)
		}
	}
	err := tn.take(resQP, 1)
	if !errors.Is(err, verbs.ErrLimit) || err.Error() != `tenant "blue": quota max_qps 2 reached` {
		t.Errorf("third QP: %v", err)
	}
	tn.give(resQP, 1)
	if err := tn.take(resQP, 1); err != nil {
		t.Errorf("after one was given back: %v", err)
	}
	if err := tn.take(resMemory, 4000); err != nil {
		t.Fatal(err)
	}
	err = tn.take(resMemory, 100)
	if !errors.Is(err, verbs.ErrLimit) || !strings.Contains(err.Error(), `tenant "blue": quota max_memory 4096 bytes reached (4000 registered, 100 more asked)`) {
		t.Errorf("memory: %v", err)
	}
	tn.maxClients = 1
	if err := tn.attach(); err != nil {
		t.Fatal(err)
	}
	if err := tn.attach(); !errors.Is(err, verbs.ErrLimit) || err.Error() != `tenant "blue": quota max_clients 1 reached` {
		t.Errorf("second process: %v", err)
	}
	if err := tn.take(resCQ, 1<<20); err != nil {
		t.Errorf("no CQ quota, yet: %v", err)
	}
}

func TestTenantPartitions(t *testing.T) {
	file := filepath.Join(t.TempDir(), "partitions.conf")
	if err := os.WriteFile(file, []byte("Default=0x7fff : ALL=full;\nstorage=0x0005 : ALL=limited;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := &Config{Partitions: file}
	for _, tc := range []struct {
		parts []string
		pkey  uint16
		ok    bool
	}{
		{nil, 0xffff, true},
		{[]string{"0x8001"}, 0x8001, true},
		{[]string{"0x8001"}, 0x0001, true}, // full membership allows limited
		{[]string{"0x0001"}, 0x8001, false},
		{[]string{"0x0001"}, 0x0001, true},
		{[]string{"0x8001"}, 0xffff, false},
		{[]string{"default"}, 0xffff, true},
		{[]string{"Default"}, 0x7fff, true},
		{[]string{"storage"}, 0xffff, false},
		{[]string{"storage"}, 0x0005, true},
		{[]string{"storage"}, 0x8005, true}, // by name: whatever membership the port has
		{[]string{"0x8001", "storage"}, 0x0005, true},
	} {
		tn := newTenant(cfg, &TenantConfig{Name: "t", Partitions: tc.parts})
		if got := tn.allowsPKey(tc.pkey); got != tc.ok {
			t.Errorf("partitions %v, P_Key %#x: %v, want %v", tc.parts, tc.pkey, got, tc.ok)
		}
	}
	y := "partitions: " + file + "\ntenants:\n  - name: a\n    match: {uids: [1]}\n    partitions: [storage, default, gold]\n"
	_, err := ParseConfig([]byte(y))
	checkConfigErr(t, err, "tenants[0].partitions[2]", `"gold" is not a partition of `+file, "line 5")
	if strings.Contains(err.Error(), "partitions[0]") || strings.Contains(err.Error(), "partitions[1]") {
		t.Errorf("storage and default refused: %v", err)
	}
	_, err = ParseConfig([]byte("tenants:\n  - name: a\n    match: {uids: [1]}\n    partitions: [storage]\n"))
	checkConfigErr(t, err, "tenants[0].partitions[0]", "no partitions file")
}

// TestBucket: the rate's token bucket, on a clock the test sets.
func TestBucket(t *testing.T) {
	b := newBucket(1<<20, 64<<10) // 1 MiB/s, 64 KiB deep
	t0 := time.Unix(1000, 0)
	wr := func(n uint32) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{{Length: n}}}
	}
	// A full bucket lets a WQE through whatever its size; the next waits
	// for the debt.
	wrs := []verbs.SendWR{wr(32 << 10), wr(64 << 10), wr(1)}
	if got := b.admit(wrs, t0); got != 2 {
		t.Fatalf("admitted %d of 32K, 64K, 1 from a 64K bucket; want 2", got)
	}
	// 32 KiB of debt: 1/32 s pays it.
	if got := b.admit(wrs[2:], t0.Add(time.Second/64)); got != 0 {
		t.Errorf("admitted with 16 KiB of debt left")
	}
	if got := b.admit(wrs[2:], t0.Add(time.Second/32+time.Millisecond)); got != 1 {
		t.Errorf("not admitted after the debt was paid")
	}
	if b.heldCount() != 2 {
		t.Errorf("held %d, want 2", b.heldCount())
	}
	// Zero-length operations are paced as minWQEBytes each.
	if got := wqeBytes(&verbs.SendWR{Opcode: verbs.WRSend}); got != minWQEBytes {
		t.Errorf("a zero-length SEND costs %d", got)
	}
	if got := wqeBytes(&verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd}); got != minWQEBytes {
		t.Errorf("an atomic costs %d", got)
	}
	// A long idle period fills the bucket to its depth only.
	b.admit(nil, t0.Add(time.Hour))
	if b.tokens != float64(64<<10) {
		t.Errorf("after an hour idle: %v tokens, want the burst", b.tokens)
	}
}

// TestTenantConcurrent: the control paths of a tenant's processes take
// and give back quota, and its engines admit WQEs, at once (run with
// -race); the quota is never passed and all comes back.
func TestTenantConcurrent(t *testing.T) {
	tn := newTenant(&Config{}, &TenantConfig{Name: "blue", Quotas: Quotas{MaxQPs: 10, Rate: "1G"}})
	var wg sync.WaitGroup
	var over atomic.Bool
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wrs := []verbs.SendWR{{Opcode: verbs.WRSend}}
			for i := range 1000 {
				if tn.take(resQP, 1) == nil {
					tn.mu.Lock()
					over.CompareAndSwap(false, tn.held[resQP] > 10)
					tn.mu.Unlock()
					tn.give(resQP, 1)
				}
				tn.bucket.admit(wrs, time.Unix(0, int64(g*1000+i)))
			}
		}()
	}
	wg.Wait()
	if over.Load() {
		t.Error("the tenant held more QPs than its quota")
	}
	if st := tn.status(); st.QPs != 0 {
		t.Errorf("after every take was given back: %d QPs held", st.QPs)
	}
}
