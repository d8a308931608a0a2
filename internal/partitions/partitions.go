// Package partitions reads InfiniBand partition configurations in opensm's
// partitions.conf syntax and computes a port's P_Key table from them.
//
// The subset a channel adapter's port needs is read:
//
//	# comment
//	Default=0x7fff, ipoib : ALL=full;
//	storage=0x8001, defmember=full : 0x0002c90300001234, ALL=limited;
//
// A statement is a partition name, an optional "=P_Key" (only its low 15
// bits count, as in opensm; "Default" without one is 0x7fff), optional
// comma-separated flags, a colon, a comma-separated member list, and a
// semicolon; it may span lines. A member is a port GUID, an IP address (an
// ibex extension: the port whose device has that address), ALL or ALL_CAS
// (every ibex port), ALL_SWITCHES or ALL_ROUTERS (no ibex port: ibex ports
// are channel adapters), or SELF. Each may carry "=full", "=limited" or
// "=both"; without one, the partition's defmember flag, else limited, as
// in opensm. Other flags (ipoib, mtu=, rate=, sl=, scope=, mgid=...) are
// accepted and ignored: they configure multicast groups ibex does not have.
// A P_Key given by a partition with no number (opensm would generate one)
// is an error: there is no subnet manager to agree on it.
//
// ibex has no subnet manager: every port computes its own table from the
// same file, as the SM would for it. A port is named by its GUID, which
// for an ibex port is the low 64 bits of its GID (the interface identifier,
// as an InfiniBand GID's low half is its port GUID): 0x0000ffff0a000001
// for the IPv4 address 10.0.0.1. SELF, opensm's name for the SM's own
// port, is the port whose table is computed.
package partitions

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// Membership bits of a P_Key: bit 15 set is full membership.
const (
	Full       = 0x8000
	DefaultKey = 0x7fff // the default partition's 15 bits
)

// Member is one entry of a partition's member list.
type Member struct {
	Kind  MemberKind
	GUID  uint64     // Kind GUID
	Addr  netip.Addr // Kind Addr
	Full  bool       // full member (bit 15 set in the port's entry)
	Limit bool       // limited member; both with "=both"
}

// MemberKind says what a member names.
type MemberKind uint8

// Member kinds.
const (
	GUID MemberKind = iota
	Addr
	All  // ALL, ALL_CAS
	None // ALL_SWITCHES, ALL_ROUTERS
	Self
)

// Partition is one statement.
type Partition struct {
	Name    string
	PKey    uint16 // low 15 bits
	Index0  bool   // the indx0 flag: first in the table
	Members []Member
	Line    int
}

// Config is a parsed partitions.conf.
type Config struct {
	Partitions []Partition
}

// Port identifies an ibex port: its GID's address.
type Port struct {
	Addr netip.Addr
}

// GUID is the port's GUID: the low 64 bits of its GID (an IPv4 address
// in its IPv4-mapped form).
func (p Port) GUID() uint64 {
	a := p.Addr.As16()
	return binary.BigEndian.Uint64(a[8:])
}

// ReadFile parses the file at path.
func ReadFile(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("partitions: %w", err)
	}
	return Parse(path, string(b))
}

// Parse parses text; name is what errors call it (a file name).
func Parse(name, text string) (*Config, error) {
	// Strip comments, keeping each byte's line.
	var b strings.Builder
	var lines []int
	for i, l := range strings.Split(text, "\n") {
		if k := strings.IndexByte(l, '#'); k >= 0 {
			l = l[:k]
		}
		b.WriteString(l)
		b.WriteByte('\n')
		for range len(l) + 1 {
			lines = append(lines, i+1)
		}
	}
	s := b.String()
	cfg := &Config{}
	seen := map[string]int{}
	start := 0
	for start < len(s) {
		end := strings.IndexByte(s[start:], ';')
		if end < 0 {
			if rest := strings.TrimSpace(s[start:]); rest != "" {
				line := lines[start+strings.Index(s[start:], rest)]
				return nil, fmt.Errorf("%s:%d: statement %q has no terminating ';'", name, line, firstLine(rest))
			}
			break
		}
		stmt := s[start : start+end]
		off := start
		start += end + 1
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		line := lines[off+len(stmt)-len(strings.TrimLeft(stmt, " \t\r\n"))]
		p, err := parseStatement(stmt)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		p.Line = line
		if l, dup := seen[p.Name]; dup {
			return nil, fmt.Errorf("%s:%d: partition %q defined again (first on line %d)", name, line, p.Name, l)
		}
		seen[p.Name] = line
		for _, q := range cfg.Partitions {
			if q.PKey == p.PKey {
				return nil, fmt.Errorf("%s:%d: partition %q: P_Key %#04x is partition %q's too (line %d)", name, line, p.Name, p.PKey, q.Name, q.Line)
			}
		}
		cfg.Partitions = append(cfg.Partitions, p)
	}
	return cfg, nil
}

func firstLine(s string) string {
	if k := strings.IndexByte(s, '\n'); k >= 0 {
		return s[:k] + "..."
	}
	return s
}

func parseStatement(stmt string) (Partition, error) {
	var p Partition
	head, members, ok := strings.Cut(stmt, ":")
	if !ok {
		return p, fmt.Errorf("statement %q: no ':' between the partition and its members", firstLine(strings.TrimSpace(stmt)))
	}
	fields := strings.Split(head, ",")
	def := strings.TrimSpace(fields[0])
	nm, key, hasKey := strings.Cut(def, "=")
	p.Name = strings.TrimSpace(nm)
	if p.Name == "" {
		return p, fmt.Errorf("statement %q: no partition name", firstLine(strings.TrimSpace(stmt)))
	}
	switch {
	case hasKey:
		v, err := strconv.ParseUint(strings.TrimSpace(key), 0, 16)
		if err != nil {
			return p, fmt.Errorf("partition %q: P_Key %q is not a 16-bit number", p.Name, strings.TrimSpace(key))
		}
		p.PKey = uint16(v) & 0x7fff
	case p.Name == "Default":
		p.PKey = DefaultKey
	default:
		return p, fmt.Errorf("partition %q: no P_Key (\"%s=0x...\"): with no subnet manager to generate one, every port must read it here", p.Name, p.Name)
	}
	if p.PKey == 0 {
		return p, fmt.Errorf("partition %q: P_Key %q: 0x0000 and 0x8000 are the invalid P_Key", p.Name, strings.TrimSpace(key))
	}
	defFull, defLimit := false, true
	for _, f := range fields[1:] {
		f = strings.TrimSpace(f)
		k, v, _ := strings.Cut(f, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "defmember":
			var err error
			if defFull, defLimit, err = membership(v); err != nil {
				return p, fmt.Errorf("partition %q: defmember: %w", p.Name, err)
			}
		case "indx0":
			p.Index0 = true
		case "ipoib", "mtu", "rate", "sl", "scope", "mgid", "Q_Key", "TClass", "FlowLabel", "HopLimit", "qkey", "tclass", "flow_label", "hoplimit", "ipv4", "ipv6":
		case "":
			return p, fmt.Errorf("partition %q: an empty flag (two commas?)", p.Name)
		default:
			return p, fmt.Errorf("partition %q: unknown flag %q", p.Name, f)
		}
	}
	for _, m := range strings.Split(members, ",") {
		m = strings.TrimSpace(m)
		if m == "" {
			if strings.TrimSpace(members) == "" {
				break // a partition with no members
			}
			return p, fmt.Errorf("partition %q: an empty member (two commas?)", p.Name)
		}
		mem := Member{Full: defFull, Limit: defLimit}
		who, how, has := cutLast(m, "=")
		who = strings.TrimSpace(who)
		if has {
			var err error
			if mem.Full, mem.Limit, err = membership(strings.TrimSpace(how)); err != nil {
				return p, fmt.Errorf("partition %q: member %q: %w", p.Name, who, err)
			}
		}
		switch who {
		case "ALL", "ALL_CAS":
			mem.Kind = All
		case "ALL_SWITCHES", "ALL_ROUTERS":
			mem.Kind = None
		case "SELF":
			mem.Kind = Self
		default:
			if g, err := strconv.ParseUint(who, 0, 64); err == nil && strings.HasPrefix(strings.ToLower(who), "0x") {
				mem.Kind, mem.GUID = GUID, g
			} else if a, err := netip.ParseAddr(who); err == nil {
				mem.Kind, mem.Addr = Addr, a.Unmap()
			} else {
				return p, fmt.Errorf("partition %q: member %q is not a port GUID (0x...), an IP address, ALL, ALL_CAS, ALL_SWITCHES, ALL_ROUTERS or SELF", p.Name, who)
			}
		}
		p.Members = append(p.Members, mem)
	}
	return p, nil
}

// cutLast cuts s around the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	if k := strings.LastIndex(s, sep); k >= 0 {
		return s[:k], s[k+len(sep):], true
	}
	return s, "", false
}

func membership(v string) (full, limited bool, err error) {
	switch v {
	case "full":
		return true, false, nil
	case "limited":
		return false, true, nil
	case "both":
		return true, true, nil
	}
	return false, false, fmt.Errorf("membership %q is not full, limited or both", v)
}

// Table returns port's P_Key table: an entry for each partition that has
// the port as a member, with bit 15 set for full membership (a "both"
// member gets a full entry and a limited one). The indx0 partition comes
// first, else the default partition (0x7fff), then the file's order. A
// port named by several members of one partition takes the strongest
// membership. It is an error for the port to be in no partition: it
// could not send a packet.
func (c *Config) Table(port Port) ([]uint16, error) {
	a := port.Addr.Unmap()
	guid := port.GUID()
	var first, rest []uint16
	for _, p := range c.Partitions {
		full, limited := false, false
		for _, m := range p.Members {
			var match bool
			switch m.Kind {
			case GUID:
				match = m.GUID == guid
			case Addr:
				match = m.Addr == a
			case All, Self:
				match = true
			}
			if match {
				full = full || m.Full
				limited = limited || m.Limit
			}
		}
		var e []uint16
		if full {
			e = append(e, p.PKey|Full)
		}
		if limited && (!full || bothOf(p, a, guid)) {
			e = append(e, p.PKey)
		}
		if p.Index0 || p.PKey == DefaultKey && len(first) == 0 {
			first = append(e, first...)
		} else {
			rest = append(rest, e...)
		}
	}
	t := append(first, rest...)
	if len(t) == 0 {
		return nil, fmt.Errorf("partitions: port %v (GUID %#016x) is a member of no partition", a, guid)
	}
	return t, nil
}

// bothOf reports whether a member naming the port asked for both
// memberships (not merely full from one member and limited from ALL).
func bothOf(p Partition, a netip.Addr, guid uint64) bool {
	for _, m := range p.Members {
		if m.Full && m.Limit && (m.Kind == All || m.Kind == Self || m.Kind == GUID && m.GUID == guid || m.Kind == Addr && m.Addr == a) {
			return true
		}
	}
	return false
}

// Match reports whether P_Keys a and b let two ports talk (IBA 10.9.3):
// the same partition (low 15 bits, not the invalid 0) and at least one of
// them a full member. Two limited members cannot talk.
func Match(a, b uint16) bool {
	return a&0x7fff == b&0x7fff && a&0x7fff != 0 && (a|b)&Full != 0
}
