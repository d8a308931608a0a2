package coll

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// UniqueID names one communicator's rendezvous, like ncclUniqueId: the
// root's TCP address and a random magic that every rank must present. Rank
// 0 creates it (NewUniqueID) and hands its String to every rank out of
// band; Bootstrap at rank 0 listens on it.
type UniqueID struct {
	Addr  string   // host:port of the rendezvous (rank 0)
	Magic [16]byte // random; a connection without it is refused
}

// NewUniqueID makes an ID for a rendezvous at addr (host:port; port 0
// is not allowed: every rank must know it).
func NewUniqueID(addr string) (UniqueID, error) {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" || port == "" {
		return UniqueID{}, fmt.Errorf("coll: unique id: address %q: want host:port with a fixed port", addr)
	}
	id := UniqueID{Addr: addr}
	if _, err := rand.Read(id.Magic[:]); err != nil {
		return UniqueID{}, fmt.Errorf("coll: unique id: %w", err)
	}
	return id, nil
}

// String is the ID's portable form: hex magic '@' address.
func (id UniqueID) String() string { return hex.EncodeToString(id.Magic[:]) + "@" + id.Addr }

// ParseUniqueID reads String's form.
func ParseUniqueID(s string) (UniqueID, error) {
	m, addr, ok := strings.Cut(s, "@")
	var id UniqueID
	b, err := hex.DecodeString(m)
	if !ok || err != nil || len(b) != len(id.Magic) {
		return id, fmt.Errorf("coll: unique id %q: want 32 hex digits, '@', host:port", s)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return id, fmt.Errorf("coll: unique id %q: address: %w", s, err)
	}
	copy(id.Magic[:], b)
	id.Addr = addr
	return id, nil
}

// Env is a rank's place in a job, as a launcher describes it.
type Env struct {
	Rank, Size, LocalRank int
	// LocalSize is the number of ranks on this rank's host, when the
	// launcher says (0: unknown).
	LocalSize int
	// Addr is the rendezvous (host:port): MASTER_ADDR:MASTER_PORT+1 under
	// torchrun; IBEX_RENDEZVOUS (or the flag given to FromEnv); under
	// Slurm on several nodes, the step's first node and a port derived
	// from the job and step ids. Empty when File is set.
	Addr string
	// Listen, when set, is where rank 0 listens instead of Addr (":port",
	// every interface, when Addr names a node of a node list).
	Listen string
	// File, on one host with no address given, is where rank 0 publishes
	// the address it listens on (127.0.0.1, a free port) and the other
	// ranks read it: a file named by the launcher's job id, in
	// IBEX_RENDEZVOUS_DIR or the temporary directory.
	File     string
	JobID    string // the launcher's job (and step) id, when it gives one
	Launcher string // "torchrun", "slurm", "openmpi", "mpich", "ibex"
}

// ErrNoLauncher is FromEnv's error when no launcher's variables are set
// at all (as opposed to a launcher's environment that is incomplete).
var ErrNoLauncher = errors.New("coll: no launcher environment (torchrun RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, SLURM_PROCID/SLURM_NTASKS or PMI_RANK/PMI_SIZE)")

// FromEnv reads the launcher's environment: torchrun (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT), Open MPI (OMPI_COMM_WORLD_RANK,
// _SIZE, _LOCAL_RANK), Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID)
// or MPICH (PMI_RANK, PMI_SIZE), in that order. The rendezvous address is
// rendezvous, else IBEX_RENDEZVOUS, else what the launcher provides (see
// launcherRendezvous): torchrun's MASTER_ADDR; on one host, a file keyed
// by the job id; Slurm on several nodes, the first node of the step. A
// launcher's environment it cannot find rank 0 from is an error naming
// what to set; no launcher at all is ErrNoLauncher.
func FromEnv(getenv func(string) string, rendezvous string) (Env, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if rendezvous == "" {
		rendezvous = getenv("IBEX_RENDEZVOUS")
	}
	type source struct {
		name              string
		rank, size, local string
	}
	for _, s := range []source{
		{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
		{"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
		{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
		{"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
	} {
		if getenv(s.rank) == "" || getenv(s.size) == "" {
			continue
		}
		e := Env{Launcher: s.name}
		var err error
		if e.Rank, err = envInt(getenv, s.rank); err != nil {
			return e, err
		}
		if e.Size, err = envInt(getenv, s.size); err != nil {
			return e, err
		}
		if getenv(s.local) != "" {
			if e.LocalRank, err = envInt(getenv, s.local); err != nil {
				return e, err
			}
		}
		if e.Size < 1 || e.Rank < 0 || e.Rank >= e.Size {
			return e, fmt.Errorf("coll: %s environment: %s=%d with %s=%d: the rank must be in [0, size)", s.name, s.rank, e.Rank, s.size, e.Size)
		}
		if err := launcherRendezvous(getenv, &e, rendezvous); err != nil {
			return e, err
		}
		return e, nil
	}
	return Env{}, ErrNoLauncher
}

func envInt(getenv func(string) string, name string) (int, error) {
	v, err := strconv.Atoi(getenv(name))
	if err != nil {
		return 0, fmt.Errorf("coll: %s=%q is not an integer", name, getenv(name))
	}
	return v, nil
}

// HostID identifies what the shared-memory provider can span: one machine
// (/etc/machine-id, else the boot id) and one network namespace (shm's
// sockets are abstract, so per namespace).
func HostID() string {
	id := ""
	for _, f := range []string{"/etc/machine-id", "/proc/sys/kernel/random/boot_id"} {
		if b, err := os.ReadFile(f); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			id = strings.TrimSpace(string(b))
			break
		}
	}
	if ns, err := os.Readlink("/proc/self/ns/net"); err == nil {
		id += "/" + ns
	}
	if id == "" {
		id, _ = os.Hostname()
	}
	return id
}

// Peer is what a rank published at the rendezvous.
type Peer struct {
	Rank int
	Host string // HostID
	Data []byte // the caller's payload (e.g. connection info)
}

// The rendezvous protocol on TCP: each rank connects to rank 0 and sends a
// hello; rank 0, once it has all size-1 hellos (and its own), sends every
// rank the whole table. Frames are length-prefixed; every field is
// checked (network input).
const (
	bootMagic   = "IBEXBOOT"
	maxPayload  = 1 << 20
	dialBackoff = 20 * time.Millisecond
	helloWait   = 5 * time.Second
)

// Boot is the bootstrap network: rank 0 holds a TCP connection to every
// other rank, opened at the rendezvous, and AllGather runs over it as
// many times as needed (connection setup, later control messages).
type Boot struct {
	id    UniqueID
	rank  int
	size  int
	peers []Peer     // from the rendezvous
	conns []net.Conn // rank 0: by rank; others: conns[0] is rank 0
}

// Bootstrap runs the rendezvous and one AllGather of data, then closes:
// every rank publishes data and gets every rank's, in rank order.
func Bootstrap(ctx context.Context, id UniqueID, rank, size int, data []byte) ([]Peer, error) {
	b, err := Rendezvous(ctx, id, rank, size)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	all, err := b.AllGather(ctx, data)
	if err != nil {
		return nil, err
	}
	peers := b.Peers()
	for r := range peers {
		peers[r].Data = all[r]
	}
	return peers, nil
}

// Rendezvous connects every rank to rank 0, which listens on id.Addr. It
// returns when all ranks are in, or when ctx ends — then with an error
// naming the ranks not heard from.
func Rendezvous(ctx context.Context, id UniqueID, rank, size int) (*Boot, error) {
	return rendezvous(ctx, id, rank, size, nil)
}

// rendezvous is Rendezvous where rank 0 may bring the listener (Split
// opens it before it can publish the address); it is closed at the end.
func rendezvous(ctx context.Context, id UniqueID, rank, size int, l net.Listener) (*Boot, error) {
	if l != nil {
		defer l.Close()
	}
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("coll: bootstrap: rank %d of %d", rank, size)
	}
	b := &Boot{id: id, rank: rank, size: size}
	self := Peer{Rank: rank, Host: HostID()}
	var err error
	if rank == 0 {
		err = b.root(ctx, self, l)
	} else {
		err = b.leaf(ctx, self)
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// localIP is the address this rank's bootstrap traffic uses: where a new
// rendezvous it hosts can be reached by the same ranks.
func (b *Boot) localIP() string {
	for _, c := range b.conns {
		if c != nil {
			if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
				return a.IP.String()
			}
		}
	}
	if h, _, err := net.SplitHostPort(b.id.Addr); err == nil && h != "" && h != "0.0.0.0" && h != "::" {
		return h
	}
	return "127.0.0.1"
}

// Peers is every rank's host, from the rendezvous.
func (b *Boot) Peers() []Peer { return append([]Peer(nil), b.peers...) }

// Close closes the bootstrap connections.
func (b *Boot) Close() {
	for _, c := range b.conns {
		if c != nil {
			_ = c.Close()
		}
	}
}

func (b *Boot) root(ctx context.Context, self Peer, l net.Listener) error {
	b.peers = make([]Peer, b.size)
	b.peers[0] = self
	b.conns = make([]net.Conn, b.size)
	if b.size == 1 {
		return nil
	}
	if l == nil {
		var lc net.ListenConfig
		var err error
		if l, err = lc.Listen(ctx, "tcp", b.id.Addr); err != nil {
			return fmt.Errorf("coll: bootstrap: rank 0 listens on %s: %w", b.id.Addr, err)
		}
		defer l.Close()
	}
	stop := context.AfterFunc(ctx, func() { _ = l.Close() })
	defer stop()
	for seen := 1; seen < b.size; {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("coll: bootstrap: %w; not heard from: ranks %s", ctx.Err(), missing(b.conns))
			}
			return fmt.Errorf("coll: bootstrap: accept: %w", err)
		}
		// A rank sends its hello as soon as it connects: a connection
		// that does not within helloWait is dropped, so a stranger cannot
		// stall the rendezvous.
		_ = c.SetDeadline(time.Now().Add(helloWait))
		p, err := readHello(c, b.id, b.size)
		_ = c.SetDeadline(time.Time{})
		if err != nil || b.conns[p.Rank] != nil {
			_ = c.Close() // a stranger, a wrong magic, or a duplicate rank
			continue
		}
		b.conns[p.Rank] = c
		b.peers[p.Rank] = p
		seen++
	}
	table := encodeTable(b.peers)
	for r := 1; r < b.size; r++ {
		if err := writeFrame(b.conns[r], table); err != nil {
			return fmt.Errorf("coll: bootstrap: send the table to rank %d: %w", r, err)
		}
	}
	return nil
}

func missing(conns []net.Conn) string {
	var out []string
	for r := 1; r < len(conns); r++ {
		if conns[r] == nil {
			out = append(out, strconv.Itoa(r))
		}
	}
	return strings.Join(out, ", ")
}

func (b *Boot) leaf(ctx context.Context, self Peer) error {
	var d net.Dialer
	var c net.Conn
	for {
		var err error
		c, err = d.DialContext(ctx, "tcp", b.id.Addr)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("coll: bootstrap: rank %d: rank 0 at %s not reachable: %w (last: %v)", self.Rank, b.id.Addr, ctx.Err(), err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(dialBackoff):
		}
	}
	b.conns = []net.Conn{c}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	if err := writeFrame(c, encodeHello(b.id, b.size, self)); err != nil {
		return fmt.Errorf("coll: bootstrap: rank %d: hello to rank 0: %w", self.Rank, err)
	}
	t, err := readFrame(c)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("coll: bootstrap: rank %d: %w waiting for rank 0's table (some ranks never joined)", self.Rank, ctx.Err())
		}
		return fmt.Errorf("coll: bootstrap: rank %d: table from rank 0: %w", self.Rank, err)
	}
	if b.peers, err = decodeTable(t, b.size); err != nil {
		return fmt.Errorf("coll: bootstrap: rank %d: %w", self.Rank, err)
	}
	return nil
}

// AllGather gives every rank every rank's data, in rank order, through
// rank 0. A rank that does not take part before ctx ends is named in the
// error.
func (b *Boot) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	if len(data) > maxPayload {
		return nil, fmt.Errorf("coll: bootstrap: payload of %d bytes exceeds %d", len(data), maxPayload)
	}
	all := make([][]byte, b.size)
	all[b.rank] = data
	if b.size == 1 {
		return all, nil
	}
	for _, c := range b.conns {
		if c != nil {
			_ = c.SetDeadline(time.Time{})
			stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
			defer stop()
		}
	}
	if b.rank != 0 {
		if err := writeFrame(b.conns[0], data); err != nil {
			return nil, fmt.Errorf("coll: bootstrap: rank %d: send to rank 0: %w", b.rank, err)
		}
		t, err := readFrame(b.conns[0])
		if err != nil {
			return nil, fmt.Errorf("coll: bootstrap: rank %d: waiting for rank 0: %w", b.rank, errOr(ctx, err))
		}
		return decodeBlobs(t, b.size)
	}
	for r := 1; r < b.size; r++ {
		d, err := readFrame(b.conns[r])
		if err != nil {
			return nil, fmt.Errorf("coll: bootstrap: rank 0: waiting for rank %d: %w", r, errOr(ctx, err))
		}
		all[r] = d
	}
	t := encodeBlobs(all)
	for r := 1; r < b.size; r++ {
		if err := writeFrame(b.conns[r], t); err != nil {
			return nil, fmt.Errorf("coll: bootstrap: rank 0: send to rank %d: %w", r, err)
		}
	}
	return all, nil
}

func errOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func encodeBlobs(all [][]byte) []byte {
	var b []byte
	for _, d := range all {
		b = binary.BigEndian.AppendUint32(b, uint32(len(d)))
		b = append(b, d...)
	}
	return b
}

func decodeBlobs(b []byte, n int) ([][]byte, error) {
	out := make([][]byte, n)
	for i := range n {
		if len(b) < 4 {
			return nil, errors.New("coll: bootstrap: truncated table")
		}
		l := binary.BigEndian.Uint32(b)
		b = b[4:]
		if uint64(l) > uint64(len(b)) {
			return nil, errors.New("coll: bootstrap: truncated table")
		}
		out[i], b = append([]byte(nil), b[:l]...), b[l:]
	}
	if len(b) != 0 {
		return nil, errors.New("coll: bootstrap: table with trailing bytes")
	}
	return out, nil
}

func writeFrame(w io.Writer, b []byte) error {
	var h [4]byte
	binary.BigEndian.PutUint32(h[:], uint32(len(b)))
	_, err := w.Write(append(h[:], b...))
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n > maxPayload*64+1024 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

// hello: magic "IBEXBOOT", id magic, size, rank, host, data.
func encodeHello(id UniqueID, size int, p Peer) []byte {
	b := append([]byte(bootMagic), id.Magic[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(size))
	return appendPeer(b, p)
}

func appendPeer(b []byte, p Peer) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(p.Rank))
	b = binary.BigEndian.AppendUint32(b, uint32(len(p.Host)))
	b = append(b, p.Host...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(p.Data)))
	return append(b, p.Data...)
}

func readHello(c net.Conn, id UniqueID, size int) (Peer, error) {
	b, err := readFrame(c)
	if err != nil {
		return Peer{}, err
	}
	if len(b) < len(bootMagic)+16+4 || string(b[:len(bootMagic)]) != bootMagic || string(b[8:24]) != string(id.Magic[:]) {
		return Peer{}, errors.New("not this communicator's hello")
	}
	if int(binary.BigEndian.Uint32(b[24:])) != size {
		return Peer{}, errors.New("size differs")
	}
	p, rest, err := readPeer(b[28:])
	if err != nil || len(rest) != 0 || p.Rank < 1 || p.Rank >= size {
		return Peer{}, errors.New("malformed hello")
	}
	return p, nil
}

func readPeer(b []byte) (Peer, []byte, error) {
	var p Peer
	u32 := func() (uint32, bool) {
		if len(b) < 4 {
			return 0, false
		}
		v := binary.BigEndian.Uint32(b)
		b = b[4:]
		return v, true
	}
	r, ok1 := u32()
	hl, ok2 := u32()
	if !ok1 || !ok2 || uint64(hl) > uint64(len(b)) || hl > 4096 {
		return p, nil, errors.New("truncated peer")
	}
	p.Rank, p.Host, b = int(r), string(b[:hl]), b[hl:]
	dl, ok := u32()
	if !ok || uint64(dl) > uint64(len(b)) || dl > maxPayload {
		return p, nil, errors.New("truncated peer data")
	}
	p.Data, b = append([]byte(nil), b[:dl]...), b[dl:]
	return p, b, nil
}

func encodeTable(peers []Peer) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(peers)))
	for _, p := range peers {
		b = appendPeer(b, p)
	}
	return b
}

func decodeTable(b []byte, size int) ([]Peer, error) {
	if len(b) < 4 || int(binary.BigEndian.Uint32(b)) != size {
		return nil, errors.New("table of the wrong size")
	}
	b = b[4:]
	peers := make([]Peer, size)
	for i := range size {
		p, rest, err := readPeer(b)
		if err != nil || p.Rank != i {
			return nil, fmt.Errorf("table entry %d malformed", i)
		}
		peers[i], b = p, rest
	}
	if len(b) != 0 {
		return nil, errors.New("table with trailing bytes")
	}
	return peers, nil
}

// LocalRanks groups ranks by host: the ranks that share rank's host, in
// order (shm reaches them; others need the network).
func LocalRanks(peers []Peer, rank int) []int {
	var out []int
	for _, p := range peers {
		if p.Host == peers[rank].Host {
			out = append(out, p.Rank)
		}
	}
	sort.Ints(out)
	return out
}

// EnvUniqueID is the unique ID ranks started by a launcher share without
// passing one around: the rendezvous address, and a magic derived from it,
// the job size and the launcher's job id (so ranks of another job on the
// same address are refused).
func EnvUniqueID(e Env) UniqueID {
	id := UniqueID{Addr: e.Addr}
	sum := sha256.Sum256([]byte(fmt.Sprintf("ibex coll %s %d %s %s", e.Addr, e.Size, e.Launcher, e.JobID)))
	copy(id.Magic[:], sum[:])
	return id
}
