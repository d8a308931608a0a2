package daemon

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/verbs"
)

// Identity is who an attached process is, as the kernel says: the
// credentials of the process that connected the control socket
// (SO_PEERCRED, fixed at connect) and its cgroup v2 path read from
// /proc/PID/cgroup when it attached. Nothing the process sends about
// itself goes into it.
type Identity struct {
	PID    int
	UID    int
	GID    int
	Groups []int  // supplementary groups (SO_PEERGROUPS), at connect
	Cgroup string // "" when the process has no cgroup v2 line, or exited before it was read
}

func (id Identity) String() string {
	return fmt.Sprintf("pid %d uid %d gid %d cgroup %q", id.PID, id.UID, id.GID, id.Cgroup)
}

// peerIdentity reads the identity of the process at the other end of conn.
func peerIdentity(conn *net.UnixConn) (Identity, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return Identity{}, err
	}
	var cred *unix.Ucred
	var cerr error
	var groups []int
	pidfd := -1
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		groups = peerGroups(int(fd))
		if p, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
			pidfd = p
		}
	}); err != nil {
		return Identity{}, err
	}
	if pidfd >= 0 {
		defer unix.Close(pidfd)
	}
	if cerr != nil {
		return Identity{}, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	id := Identity{PID: int(cred.Pid), UID: int(cred.Uid), GID: int(cred.Gid), Groups: groups}
	id.Cgroup = cgroupOf(id.PID)
	// /proc/PID is the connecting process only while it lives: with its
	// pidfd (SO_PEERPIDFD, Linux 6.5), a process that is gone after the
	// read (its pid perhaps another's already) leaves the cgroup unknown.
	if pidfd >= 0 && unix.PidfdSendSignal(pidfd, 0, nil, 0) != nil {
		id.Cgroup = ""
	}
	return id, nil
}

// peerGroups is the supplementary groups of the peer of socket fd when
// it connected (SO_PEERGROUPS, Linux 4.13); nil if the kernel says none.
func peerGroups(fd int) []int {
	buf := make([]uint32, 64)
	for range 2 {
		n := uint32(4 * len(buf))
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch errno {
		case 0:
			out := make([]int, 0, n/4)
			for _, g := range buf[:n/4] {
				out = append(out, int(g))
			}
			return out
		case unix.ERANGE:
			buf = make([]uint32, n/4+1) // n is the size the kernel needs
		default:
			return nil
		}
	}
	return nil
}

// cgroupOf is the cgroup v2 path of pid (the "0::/path" line of
// /proc/PID/cgroup), "" when there is none.
func cgroupOf(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	return parseCgroup(b)
}

func parseCgroup(b []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return p
		}
	}
	return ""
}

// TenantOf is the name of the tenant the policy of c gives a process
// with identity id: the first of c.Tenants whose match takes it, else
// c.DefaultTenant; ok is false when that is "" too (the process is
// refused). With no tenants configured it is ImplicitTenant for every
// process.
func (c *Config) TenantOf(id Identity) (name string, ok bool) {
	if len(c.Tenants) == 0 {
		return ImplicitTenant, true
	}
	for i := range c.Tenants {
		if c.Tenants[i].Match.takes(id) {
			return c.Tenants[i].Name, true
		}
	}
	return c.DefaultTenant, c.DefaultTenant != ""
}

// takes says whether m matches id: every kind it gives matches, and it
// gives at least one.
func (m *TenantMatch) takes(id Identity) bool {
	if len(m.UIDs)+len(m.GIDs)+len(m.Cgroups) == 0 {
		return false
	}
	if len(m.UIDs) > 0 && !slices.Contains(m.UIDs, id.UID) {
		return false
	}
	if len(m.GIDs) > 0 && !slices.Contains(m.GIDs, id.GID) &&
		!slices.ContainsFunc(id.Groups, func(g int) bool { return slices.Contains(m.GIDs, g) }) {
		return false
	}
	if len(m.Cgroups) > 0 && !slices.ContainsFunc(m.Cgroups, func(p string) bool { return underCgroup(id.Cgroup, p) }) {
		return false
	}
	return true
}

// underCgroup says whether cgroup path cg is p or below it.
func underCgroup(cg, p string) bool {
	if cg == "" {
		return false
	}
	if p == "/" {
		return true
	}
	return cg == p || strings.HasPrefix(cg, p+"/")
}

// ErrRefused is wrapped by the error of a process the tenant policy
// refuses at attach (it matches no tenant and there is no default one).
var ErrRefused = errors.New("refused by the tenant policy")

// QuotaError is a call that would take a tenant past one of its quotas.
// It wraps verbs.ErrLimit, which the process's verbs error wraps too.
type QuotaError struct {
	Tenant string
	Quota  string // max_clients, max_qps, max_cqs, max_mrs, max_memory
	Limit  uint64
	Held   uint64 // what the tenant's processes hold
	Asked  uint64 // what the call wanted on top of it
}

func (e *QuotaError) Error() string {
	if e.Quota == "max_memory" {
		return fmt.Sprintf("tenant %q: quota max_memory %d bytes reached (%d registered, %d more asked)", e.Tenant, e.Limit, e.Held, e.Asked)
	}
	return fmt.Sprintf("tenant %q: quota %s %d reached", e.Tenant, e.Quota, e.Limit)
}

func (e *QuotaError) Unwrap() error { return verbs.ErrLimit }

// The resources a tenant's quotas count.
type resource int

const (
	resQP resource = iota
	resCQ
	resMR
	resMemory
	nResources
)

var quotaNames = [nResources]string{"max_qps", "max_cqs", "max_mrs", "max_memory"}

// tenant is one tenant at run time: its policy and what its processes
// hold now, summed. mu guards held and clients (a leaf lock: taken under
// a client's mu, never the other way).
type tenant struct {
	name       string
	limit      [nResources]uint64 // 0: none
	pkeys      []uint16           // allowed P_Keys (names resolved: full membership)
	parts      []string           // the partitions as the config gives them
	anyPart    bool               // no partitions configured: any
	bucket     *bucket            // nil: no rate
	maxClients int                // 0: none

	mu      sync.Mutex
	held    [nResources]uint64
	clients int
}

// newTenant is tc at run time; cfg resolves partition names (a Config
// that passed Validate resolves them all).
func newTenant(cfg *Config, tc *TenantConfig) *tenant {
	t := &tenant{name: tc.Name, anyPart: len(tc.Partitions) == 0, parts: tc.Partitions}
	q := &tc.Quotas
	t.limit = [nResources]uint64{uint64(q.MaxQPs), uint64(q.MaxCQs), uint64(q.MaxMRs), sizeOf(q.MaxMemory)}
	t.maxClients = q.MaxClients
	for _, p := range tc.Partitions {
		if k, _ := parsePartition(p); k > 0 {
			t.pkeys = append(t.pkeys, uint16(k))
		} else if k, msg := cfg.partitionKey(p); msg == "" {
			t.pkeys = append(t.pkeys, k)
		}
	}
	if rate := sizeOf(q.Rate); rate > 0 {
		burst := sizeOf(q.Burst)
		if burst == 0 {
			burst = max(rate/100, minBurst)
		}
		t.bucket = newBucket(rate, burst)
	}
	return t
}

// tenants builds the run-time tenants of cfg: its Tenants, or the
// implicit one.
func tenantsOf(cfg *Config) map[string]*tenant {
	m := map[string]*tenant{}
	if len(cfg.Tenants) == 0 {
		m[ImplicitTenant] = newTenant(cfg, &TenantConfig{Name: ImplicitTenant})
		return m
	}
	for i := range cfg.Tenants {
		m[cfg.Tenants[i].Name] = newTenant(cfg, &cfg.Tenants[i])
	}
	return m
}

// take adds n of r to what the tenant holds, or says which quota it would
// pass.
func (t *tenant) take(r resource, n uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.limit[r]; l > 0 && t.held[r]+n > l {
		return &QuotaError{Tenant: t.name, Quota: quotaNames[r], Limit: l, Held: t.held[r], Asked: n}
	}
	t.held[r] += n
	return nil
}

// attach counts one more process of the tenant, or says it has its
// max_clients already.
func (t *tenant) attach() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.maxClients > 0 && t.clients >= t.maxClients {
		return &QuotaError{Tenant: t.name, Quota: "max_clients", Limit: uint64(t.maxClients), Held: uint64(t.clients), Asked: 1}
	}
	t.clients++
	return nil
}

// add is take without the quota (objects an upgrade brings back).
func (t *tenant) add(r resource, n uint64) {
	t.mu.Lock()
	t.held[r] += n
	t.mu.Unlock()
}

// give returns n of r.
func (t *tenant) give(r resource, n uint64) {
	t.mu.Lock()
	t.held[r] -= min(n, t.held[r])
	t.mu.Unlock()
}

// allowsPKey says whether the tenant's QPs may use P_Key pkey. A P_Key
// names its partition by the low 15 bits; the top bit is full membership,
// which a tenant allowed only limited membership (0x0001) is not given.
func (t *tenant) allowsPKey(pkey uint16) bool {
	if t.anyPart {
		return true
	}
	for _, k := range t.pkeys {
		if k == pkey || (k&0x8000 != 0 && k&0x7fff == pkey&0x7fff) {
			return true
		}
	}
	return false
}

func (t *tenant) partitions() string { return strings.Join(t.parts, ", ") }

func (t *tenant) status() ibexdwire.TenantStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := ibexdwire.TenantStatus{Name: t.name, Clients: t.clients,
		QPs: t.held[resQP], CQs: t.held[resCQ], MRs: t.held[resMR], MRBytes: t.held[resMemory],
		MaxClients: uint64(t.maxClients), MaxQPs: t.limit[resQP], MaxCQs: t.limit[resCQ], MaxMRs: t.limit[resMR], MaxMemory: t.limit[resMemory]}
	if t.bucket != nil {
		ts.Rate, ts.Burst, ts.Held = t.bucket.rate, t.bucket.burst, t.bucket.heldCount()
	}
	return ts
}

// bucket is a tenant's token bucket of send bytes, shared by the engines
// serving its processes. It may go into debt: a WQE is taken whenever the
// bucket holds any tokens, whatever its size, and the tenant then waits
// until the debt is paid, so the long-run rate is the configured one even
// for WQEs larger than the burst.
type bucket struct {
	rate, burst uint64 // bytes per second, bytes

	mu     sync.Mutex
	tokens float64 // bytes; negative: debt
	last   time.Time
	held   uint64 // passes that found the bucket empty with WQEs waiting
}

func newBucket(rate, burst uint64) *bucket {
	return &bucket{rate: rate, burst: burst, tokens: float64(burst)}
}

// refill adds the tokens earned since the last look (b.mu held) and
// says whether any are there.
func (b *bucket) refill(now time.Time) bool {
	// Engines read their clocks before taking the lock: one may come
	// with a time older than the last, which earns nothing.
	if b.last.IsZero() || now.After(b.last) {
		if !b.last.IsZero() {
			b.tokens = min(b.tokens+now.Sub(b.last).Seconds()*float64(b.rate), float64(b.burst))
		}
		b.last = now
	}
	return b.tokens > 0
}

func (b *bucket) heldCount() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// admit takes the send WQEs the bucket lets through at now, in order: as
// many as find it holding tokens, each paying its bytes (wqeBytes). It
// returns how many; the rest stay in the ring for a later pass.
func (b *bucket) admit(wrs []verbs.SendWR, now time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	for i := range wrs {
		if b.tokens <= 0 {
			b.held++
			return i
		}
		b.tokens -= float64(wqeBytes(&wrs[i]))
	}
	return len(wrs)
}

// wqeBytes is what a send WQE costs in its tenant's rate: the bytes it
// moves (its payload; a READ's, which come back; an atomic's 8), at least
// minWQEBytes.
func wqeBytes(wr *verbs.SendWR) uint64 {
	var n uint64
	switch {
	case wr.Opcode.IsAtomic():
		n = 8
	case wr.Inline != nil:
		n = uint64(len(wr.Inline))
	default:
		for _, s := range wr.SGL {
			n += uint64(s.Length)
		}
	}
	return max(n, minWQEBytes)
}
