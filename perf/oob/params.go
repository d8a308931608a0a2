package oob

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Version is the perftest protocol version this package speaks: the VERSION
// string of perftest 4.5 (Debian bookworm's perftest 4.5+0.17 sends "6.06").
// It is sent in exchange_versions, and the peer decides formats by it.
const Version = "6.06"

// minPeerVersion: perftest 4.5's check_version_compatibility exits when the
// peer's version is below 5.70; this package refuses the same peers.
const minPeerVersion = 5.70

// DefaultPort is perftest's DEF_PORT, the TCP port of the exchange.
const DefaultPort = 18515

// Tests whose exchange this package knows (perftest program names without
// "ib_"). Their sequences differ; see the package documentation.
const (
	WriteBW  = "write_bw"
	ReadBW   = "read_bw"
	SendBW   = "send_bw"
	AtomicBW = "atomic_bw"
	WriteLat = "write_lat"

	// ibex's other latency tests. perftest's ib_read_lat, ib_send_lat and
	// ib_atomic_lat are not spoken: between two ibex ends these use
	// ib_write_lat's exchange, and end with ctx_close_connection (a sync
	// and "done") so that a passive server stays until the client is done.
	ReadLat   = "read_lat"
	SendLat   = "send_lat"
	AtomicLat = "atomic_lat"
)

var knownTests = []string{WriteBW, ReadBW, SendBW, AtomicBW, WriteLat, ReadLat, SendLat, AtomicLat}

// isLat reports whether name is a latency test (one QP, ib_write_lat's
// exchange).
func isLat(name string) bool {
	return name == WriteLat || name == ReadLat || name == SendLat || name == AtomicLat
}

// Test describes the local test. perftest never sends it; it selects the
// message sequence (which differs between perftest programs and options) and,
// when the peer is ibex too, is exchanged and compared (see the package
// documentation).
type Test struct {
	Name     string // WriteBW, ReadBW, SendBW, AtomicBW, WriteLat (ibex also: ReadLat, SendLat, AtomicLat)
	Conn     string // connection type: "RC" (the zero value means RC), "UC", "UD"
	Size     uint64 // -s: message size (ignored when AllSizes)
	AllSizes bool   // -a: run sizes 2..2^23
	Iters    uint64 // -n (ignored when Duration > 0)
	Duration int    // -D seconds; 0 means iterations
	QPs      int    // -q; 0 means len(dests) of ExchangeDests
	Duplex   bool   // -b: bidirectional
	// Device is the device's name (udp0, shm0; at most 15 bytes, "" if
	// unknown). Two ends whose devices are of different kinds (the name
	// without its number) cannot reach each other.
	Device string
	// Gbits (--report_gbits): the bandwidth figures of this end's Report
	// are Gb/s, not MiB/s, so a passive server can print them in its own
	// unit. Not a mismatch.
	Gbits bool
}

// Params are what perftest 4.5 exchanges before the QPs' data, in its order:
// exchange_versions (Version), check_sys_data (CycleBuffer, CacheLineSize),
// check_mtu (MTU). The zero value of each local field means perftest's
// default.
type Params struct {
	// Version is user_param->version. Local: ignored (always Version).
	// Remote: what the peer sent, text before the first NUL.
	Version string
	// CycleBuffer is user_param->cycle_buffer, the buffer alignment
	// (sysconf(_SC_PAGESIZE) by default; 0 here means 4096). perftest adopts
	// the larger of the two.
	CycleBuffer int
	// CacheLineSize is user_param->cache_line_size (0 here means 64). perftest
	// adopts the larger of the two.
	CacheLineSize int
	// MTU is user_param->curr_mtu in bytes, 256..4096 (the wire carries the
	// ibv_mtu enum, 1..5; 0 here means 1024). perftest adopts the smaller.
	MTU int
	// GIDIndex is user_param->gid_index. It is not sent: -1 (InfiniBand
	// without -x) selects perftest's short dest message without a GID; any
	// other value (always so on RoCE) the message with the GID. Both ends must
	// agree, as with perftest.
	GIDIndex int

	// Test is the local test. In the remote Params it is the peer's test, set
	// only when Ibex is true.
	Test Test
	// Ibex (remote only) reports that the peer is ibex and sent its Test.
	Ibex bool
}

// Negotiate returns the values both ends run with after Handshake, computed
// as perftest does: the larger cycle buffer and cache line, the smaller MTU.
func Negotiate(local, remote Params) Params {
	p := local.withDefaults()
	p.CycleBuffer = max(p.CycleBuffer, remote.CycleBuffer)
	p.CacheLineSize = max(p.CacheLineSize, remote.CacheLineSize)
	if remote.MTU >= 256 && remote.MTU < p.MTU {
		p.MTU = remote.MTU
	}
	return p
}

func (p Params) withDefaults() Params {
	p.Version = Version
	if p.CycleBuffer == 0 {
		p.CycleBuffer = 4096
	}
	if p.CacheLineSize == 0 {
		p.CacheLineSize = 64
	}
	if p.MTU == 0 {
		p.MTU = 1024
	}
	if p.Test.Conn == "" {
		p.Test.Conn = "RC"
	}
	return p
}

func (p Params) validate() error {
	if !slices.Contains(knownTests, p.Test.Name) {
		return wrapf(ErrInvalid, "Test.Name %q: want one of %v", p.Test.Name, knownTests)
	}
	if mtuEnum(p.MTU) == 0 {
		return wrapf(ErrInvalid, "MTU %d: want 256, 512, 1024, 2048 or 4096", p.MTU)
	}
	if p.CycleBuffer < 0 || p.CycleBuffer > 1<<30 {
		return wrapf(ErrInvalid, "CycleBuffer %d out of range", p.CycleBuffer)
	}
	if p.CacheLineSize < 0 || p.CacheLineSize > 1<<20 {
		return wrapf(ErrInvalid, "CacheLineSize %d out of range", p.CacheLineSize)
	}
	if p.Test.QPs < 0 || p.Test.QPs > maxQPs {
		return wrapf(ErrInvalid, "Test.QPs %d: want 0..%d", p.Test.QPs, maxQPs)
	}
	if p.Test.Duration < 0 {
		return wrapf(ErrInvalid, "Test.Duration %d is negative", p.Test.Duration)
	}
	if len(p.Test.Name) > 15 || len(p.Test.Conn) > 7 {
		return wrapf(ErrInvalid, "Test.Conn %q too long", p.Test.Conn)
	}
	return nil
}

// maxQPs is perftest's MAX_QP_NUM.
const maxQPs = 16384

// --- exchange_versions: char version[MAX_VERSION], MAX_VERSION = 16 ---

const versionSize = 16

// The ibex marker rides in the bytes after the version string's NUL, which
// perftest never looks at: it parses rem_version with atof/strtod only,
// which stop at the NUL (checked in the 4.5+0.17 binaries: rem_version is
// only ever passed to strtod). A real perftest sends NULs there (it strncpy's
// VERSION into a zeroed struct).
const (
	ibexMarker   = "ibex"
	ibexProtocol = 1 // version of the ibex extension (the Test exchange)
)

func encodeVersion() []byte {
	b := make([]byte, versionSize)
	n := copy(b, Version)
	n++ // NUL
	n += copy(b[n:], ibexMarker)
	b[n] = ibexProtocol
	return b
}

// parseVersion returns the version text (before the first NUL), its value as
// perftest's atof reads it, and the peer's ibex extension version (0 for a
// real perftest).
func parseVersion(b []byte) (text string, v float64, ext int, err error) {
	end := bytes.IndexByte(b, 0)
	if end < 0 {
		end = len(b)
	}
	text = string(b[:end])
	v, ok := atof(text)
	if !ok {
		return text, 0, 0, wrapf(ErrProtocol, "peer sent version %s: not a perftest version number (is it perftest?)", quote(b))
	}
	rest := b[min(end+1, len(b)):]
	if len(rest) > len(ibexMarker) && string(rest[:len(ibexMarker)]) == ibexMarker {
		ext = int(rest[len(ibexMarker)])
	}
	return text, v, ext, nil
}

// atof reads the leading decimal number as C's atof does for the values
// perftest sends ("6.06"); no exponents, no sign.
func atof(s string) (float64, bool) {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j < len(s) && s[j] == '.' {
		j++
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
	}
	num := s[i:j]
	if num == "" || num == "." {
		return 0, false
	}
	v, err := strconv.ParseFloat(num, 64)
	return v, err == nil
}

// --- check_sys_data: two ctx_xchg_data of a 4-byte int, big-endian ---

func encodeInt32(v int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(int32(v))) }

func decodeInt32(b []byte) int { return int(int32(binary.BigEndian.Uint32(b))) }

// --- check_mtu: sprintf(cur, "%d", curr_mtu), 2 bytes sent (peer >= 5.31) ---

const mtuSize = 2

// mtuEnum is enum ibv_mtu: 256 -> 1 ... 4096 -> 5; 0 for other values.
func mtuEnum(bytes int) int {
	for e := 1; e <= 5; e++ {
		if bytes == 128<<e {
			return e
		}
	}
	return 0
}

func encodeMTU(bytes int) []byte { return []byte{byte('0' + mtuEnum(bytes)), 0} }

// parseMTU reads the peer's curr_mtu. perftest itself ignores a value outside
// 1..5 (valid_mtu_size), but a real perftest never sends one, so here it is a
// protocol error: the stream is not where it should be.
func parseMTU(b []byte) (int, error) {
	if len(b) != mtuSize || b[0] < '1' || b[0] > '5' || b[1] != 0 {
		return 0, wrapf(ErrProtocol, "peer sent MTU %s: want one digit 1-5 (ibv_mtu) and a NUL", quote(b))
	}
	return 128 << (b[0] - '0'), nil
}

// --- ibex extension: the Test, 64 bytes, only between two ibex ends ---

const testMsgSize = 64

const (
	flagAllSizes = 1 << iota
	flagDuplex
	flagNoGID
	flagGbits
)

func encodeTest(t Test, noGID bool) []byte {
	b := make([]byte, testMsgSize)
	copy(b[0:16], t.Name)
	copy(b[16:24], t.Conn)
	binary.BigEndian.PutUint64(b[24:], t.Size)
	binary.BigEndian.PutUint64(b[32:], t.Iters)
	binary.BigEndian.PutUint32(b[40:], uint32(t.Duration))
	binary.BigEndian.PutUint32(b[44:], uint32(t.QPs))
	var f byte
	if t.AllSizes {
		f |= flagAllSizes
	}
	if t.Duplex {
		f |= flagDuplex
	}
	if noGID {
		f |= flagNoGID
	}
	if t.Gbits {
		f |= flagGbits
	}
	b[48] = f
	copy(b[49:64], t.Device)
	return b
}

func parseTest(b []byte) (t Test, noGID bool, err error) {
	if len(b) != testMsgSize {
		return Test{}, false, wrapf(ErrProtocol, "ibex test message of %d bytes, want %d", len(b), testMsgSize)
	}
	name, ok1 := cstring(b[0:16])
	conn, ok2 := cstring(b[16:24])
	dev, ok3 := cstring(b[49:64])
	if !ok1 || !ok2 || !ok3 {
		return Test{}, false, wrapf(ErrProtocol, "ibex test message %s is malformed", quote(b))
	}
	t = Test{
		Name:     name,
		Conn:     conn,
		Size:     binary.BigEndian.Uint64(b[24:]),
		Iters:    binary.BigEndian.Uint64(b[32:]),
		Duration: int(int32(binary.BigEndian.Uint32(b[40:]))),
		QPs:      int(int32(binary.BigEndian.Uint32(b[44:]))),
		AllSizes: b[48]&flagAllSizes != 0,
		Duplex:   b[48]&flagDuplex != 0,
		Device:   dev,
		Gbits:    b[48]&flagGbits != 0,
	}
	return t, b[48]&flagNoGID != 0, nil
}

// cstring reads a NUL-padded printable ASCII field.
func cstring(b []byte) (string, bool) {
	end := bytes.IndexByte(b, 0)
	if end < 0 {
		end = len(b)
	}
	for _, c := range b[:end] {
		if c < 0x21 || c > 0x7e {
			return "", false
		}
	}
	return string(b[:end]), true
}

// compareTests lists the differences that make a test pair meaningless.
func compareTests(local, remote Test, localNoGID, remoteNoGID bool) []string {
	var d []string
	if local.Device != "" && remote.Device != "" && deviceKind(local.Device) != deviceKind(remote.Device) {
		// Nothing else matters: the QPs cannot reach each other.
		return []string{fmt.Sprintf("the two ends use different devices (%s / %s)", local.Device, remote.Device)}
	}
	diff := func(what string, l, r any) {
		if l != r {
			d = append(d, fmt.Sprintf("%s: we %v, peer %v", what, l, r))
		}
	}
	diff("test", local.Name, remote.Name)
	diff("connection type (-c)", local.Conn, remote.Conn)
	diff("all sizes (-a)", local.AllSizes, remote.AllSizes)
	if !local.AllSizes && !remote.AllSizes {
		diff("size (-s)", local.Size, remote.Size)
	}
	diff("duration (-D)", local.Duration, remote.Duration)
	if local.Duration == 0 && remote.Duration == 0 {
		diff("iterations (-n)", local.Iters, remote.Iters)
	}
	diff("QPs (-q)", local.QPs, remote.QPs)
	diff("bidirectional (-b)", local.Duplex, remote.Duplex)
	diff("GID in dests (gid_index -1)", localNoGID, remoteNoGID)
	return d
}

// deviceKind is a device name without its trailing number: udp0 and udp1
// are one kind and reach each other; udp0 and shm0 do not.
func deviceKind(name string) string {
	return strings.TrimRight(name, "0123456789")
}
