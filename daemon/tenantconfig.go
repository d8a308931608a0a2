package daemon

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/ibex-rdma/ibex/internal/partitions"
	"github.com/ibex-rdma/ibex/internal/units"
)

// TenantConfig is one tenant of the daemon: who belongs to it (Match),
// which partitions its QPs may use and what all its processes together
// may hold. A process attaching is given the first tenant whose Match
// takes it (tenant.go); with no tenants configured every process belongs
// to one implicit tenant, "default", with no quotas beyond Limits.
type TenantConfig struct {
	Name       string      `yaml:"name"`       // required, unique, ^[a-z0-9][a-z0-9_.-]*$ (at most 64 bytes)
	Match      TenantMatch `yaml:"match"`      // required, except for the default_tenant: which processes belong to it
	Partitions []string    `yaml:"partitions"` // P_Keys (0x8001) or names of the partitions file's partitions ("default": 0xffff) its QPs may use; absent: any
	Quotas     Quotas      `yaml:"quotas"`
}

// TenantMatch says which processes a tenant takes, by what the kernel
// says of them when they attach (SO_PEERCRED and /proc/PID/cgroup),
// never by what they say of themselves. Each kind given must match (a
// process with one of the uids AND one of the gids AND in one of the
// cgroups); within a kind, any one of the values does.
type TenantMatch struct {
	UIDs    []int    `yaml:"uids"`    // the process's user id (SO_PEERCRED)
	GIDs    []int    `yaml:"gids"`    // its primary group id (SO_PEERCRED) or one of its supplementary groups (SO_PEERGROUPS)
	Cgroups []string `yaml:"cgroups"` // cgroup v2 paths: the process's cgroup is one of them or below one ("/a" takes /a and /a/b, not /ab)
}

// Quotas bound what all of a tenant's processes hold together (counted
// beside Limits, which bound each process). 0 or absent: no tenant-wide
// bound.
type Quotas struct {
	MaxClients int    `yaml:"max_clients"` // its processes attached at once (beside limits.max_clients, the daemon's)
	MaxQPs     int    `yaml:"max_qps"`     // QPs of all its processes
	MaxCQs     int    `yaml:"max_cqs"`     // CQs of all its processes
	MaxMRs     int    `yaml:"max_mrs"`     // MRs of all its processes
	MaxMemory  string `yaml:"max_memory"`  // bytes registered by all its processes, K/M/G/T suffix
	// Rate caps the bytes per second its processes' send WQEs may move
	// (the payload of each, at least 64 bytes per WQE), a token bucket the
	// engines take the tenant's send WQEs through: K/M/G/T suffix.
	Rate  string `yaml:"rate"`
	Burst string `yaml:"burst"` // the bucket's depth; default rate/100 (10 ms of it), at least 64K
}

// ImplicitTenant is the tenant of every process when the config names
// none.
const ImplicitTenant = "default"

// The P_Key of the default partition, full membership: the one every port
// has at index 0 and the one ibex sends today (rc/rcwire.DefaultPKey).
const defaultPKey = 0xffff

var tenantName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

// partitionName is a partition named in partitions.conf style.
var partitionName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

// minBurst is the smallest bucket: one 64 KiB message passes at once.
const minBurst = 64 << 10

// minWQEBytes is what a send WQE costs at least in a tenant's rate: a
// packet's headers, so that zero-length operations are paced too.
const minWQEBytes = 64

func (c *Config) validateTenants(v *validator) {
	names := make(map[string]int, len(c.Tenants))
	for i := range c.Tenants {
		t := &c.Tenants[i]
		at := fmt.Sprintf("tenants[%d].", i)
		switch j, dup := names[t.Name]; {
		case t.Name == "":
			v.bad(at+"name", "missing; want a name such as blue")
		case len(t.Name) > 64 || !tenantName.MatchString(t.Name):
			v.bad(at+"name", "%q is not a tenant name (lower case letters, digits, _ . -, at most 64 bytes)", t.Name)
		case dup:
			v.bad(at+"name", "%q is also the name of tenants[%d]", t.Name, j)
		default:
			names[t.Name] = i
		}
		m := &t.Match
		if len(m.UIDs)+len(m.GIDs)+len(m.Cgroups) == 0 && t.Name != c.DefaultTenant {
			v.bad(at+"match", "no uids, gids or cgroups: the tenant would take no process (name it in default_tenant to take those no tenant matches)")
		}
		for k, id := range m.UIDs {
			if id < 0 || id > 1<<32-2 {
				v.bad(fmt.Sprintf("%smatch.uids[%d]", at, k), "%d is not a user id (0..4294967294)", id)
			}
		}
		for k, id := range m.GIDs {
			if id < 0 || id > 1<<32-2 {
				v.bad(fmt.Sprintf("%smatch.gids[%d]", at, k), "%d is not a group id (0..4294967294)", id)
			}
		}
		for k, p := range m.Cgroups {
			f := fmt.Sprintf("%smatch.cgroups[%d]", at, k)
			switch {
			case !strings.HasPrefix(p, "/"):
				v.bad(f, "%q is not a cgroup path; want one as /proc/PID/cgroup gives it, from /", p)
			case path.Clean(p) != p:
				v.bad(f, "%q is not a clean path; want %q", p, path.Clean(p))
			}
		}
		for k, p := range t.Partitions {
			f := fmt.Sprintf("%spartitions[%d]", at, k)
			if pk, msg := parsePartition(p); msg != "" {
				v.bad(f, "%s", msg)
			} else if pk < 0 {
				if _, msg := c.partitionKey(p); msg != "" {
					v.bad(f, "%s", msg)
				}
			}
		}
		q := &t.Quotas
		v.quota(at+"quotas.max_clients", q.MaxClients)
		v.quota(at+"quotas.max_qps", q.MaxQPs)
		v.quota(at+"quotas.max_cqs", q.MaxCQs)
		v.quota(at+"quotas.max_mrs", q.MaxMRs)
		v.size(at+"quotas.max_memory", q.MaxMemory)
		v.size(at+"quotas.rate", q.Rate)
		v.size(at+"quotas.burst", q.Burst)
		if q.Burst != "" && q.Rate == "" {
			v.bad(at+"quotas.burst", "%q without a rate: a burst bounds nothing alone", q.Burst)
		}
	}
	switch {
	case c.DefaultTenant == "":
	case len(c.Tenants) == 0:
		v.bad("default_tenant", "%q, but no tenants are configured (with none, every process is in one implicit tenant)", c.DefaultTenant)
	default:
		if _, ok := names[c.DefaultTenant]; !ok {
			v.bad("default_tenant", "%q is not the name of any of tenants", c.DefaultTenant)
		}
	}
}

// quota refuses a negative count; 0 means none.
func (v *validator) quota(field string, n int) {
	if n < 0 {
		v.bad(field, "%d must not be negative (0 or absent: no tenant-wide bound)", n)
	}
}

// size refuses a value that is not a positive size; "" means none.
func (v *validator) size(field, s string) {
	if s == "" {
		return
	}
	switch n, err := units.ParseBytes(s); {
	case err != nil:
		v.bad(field, "%q: %v", s, err)
	case n <= 0:
		v.bad(field, "%q must be positive (absent: none)", s)
	}
}

// parsePartition reads one entry of a tenant's partitions: a P_Key (hex
// 0x8001 or decimal; 0x0000 and 0x8000 are not P_Keys) or a partition's
// name. pkey is -1 for a name.
func parsePartition(s string) (pkey int, msg string) {
	if s == "" {
		return 0, "empty; want a P_Key such as 0x8001 or a partition name"
	}
	if c := s[0]; c >= '0' && c <= '9' {
		n, err := strconv.ParseUint(s, 0, 16)
		if err != nil {
			return 0, fmt.Sprintf("%q is not a P_Key (a 16-bit number such as 0x8001)", s)
		}
		if n&0x7fff == 0 {
			return 0, fmt.Sprintf("%q is not a valid P_Key (0x0000 and 0x8000 are reserved)", s)
		}
		return int(n), ""
	}
	if !partitionName.MatchString(s) {
		return 0, fmt.Sprintf("%q is neither a P_Key nor a partition name", s)
	}
	return -1, ""
}

// partitionKey is the P_Key of the partition the config's partitions
// file names name, with full membership (a tenant allowed a partition by
// name may use whatever membership the port has in it): "default" (any
// case) is the default partition, 0xffff, with or without a file.
func (c *Config) partitionKey(name string) (pkey uint16, msg string) {
	if strings.EqualFold(name, ImplicitTenant) {
		return defaultPKey, ""
	}
	if c.Partitions == "" {
		return 0, fmt.Sprintf("%q names a partition, but the config gives no partitions file (partitions:); give a P_Key or \"default\"", name)
	}
	pc, err := partitions.ReadFile(c.Partitions)
	if err != nil {
		return 0, fmt.Sprintf("%q: %v", name, err)
	}
	for _, p := range pc.Partitions {
		if p.Name == name {
			return p.PKey | partitions.Full, ""
		}
	}
	return 0, fmt.Sprintf("%q is not a partition of %s", name, c.Partitions)
}

func sizeOf(s string) uint64 {
	if s == "" {
		return 0
	}
	n, err := units.ParseBytes(s)
	if err != nil || n < 0 {
		return 0
	}
	return uint64(n)
}
