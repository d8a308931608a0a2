package check

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ibex-rdma/ibex/coll"
	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
)

// Measure runs the check on c: the pair schedule (Rounds), each round's
// pairs at once with a barrier between rounds, then the all-reduce.
// Every rank of c must call it with the same cfg. Rank 0 returns the
// figures of the whole job; the other ranks return nil.
//
// A pair {a, b}, a < b, over the link the communicator chose for it
// (Comm.Transport): cfg.Warmup exchanges of cfg.Bytes each way; a sends
// cfg.Iters messages of cfg.Bytes and b acknowledges them with one
// message of 8 bytes, a's clock giving a->b (the best of cfg.Repeats
// such runs); then the same from b; then
// a times cfg.LatIters ping-pongs of 8 bytes after a tenth as many
// untimed ones. The all-reduce is coll's benchmark (nccl-tests' loop,
// results checked). The ranks' records go to rank 0 over the
// communicator itself.
func Measure(ctx context.Context, c *coll.Comm, cfg Config) (*Figures, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	n, me := c.Size(), c.Rank()
	if n < 2 {
		return nil, fmt.Errorf("%w: %d rank: a check needs at least 2", ErrConfig, n)
	}
	host, _ := os.Hostname()
	rec := rankRecord{Rank: me, Host: host, Peers: make([]peerRecord, n)}
	m := &measurer{c: c, cfg: cfg, big: make([]byte, cfg.Bytes), small: make([]byte, LatBytes)}
	for i, round := range Rounds(n) {
		if p := partner(round, me); p >= 0 {
			pr, err := m.pair(ctx, p)
			if err != nil {
				return nil, fmt.Errorf("check: round %d: pair %d<->%d over %s: %w", i, min(me, p), max(me, p), c.Transport(p), err)
			}
			rec.Peers[p] = pr
		}
		// Rounds do not overlap: a rank done early would otherwise start
		// its next pair while its partner still measures the last.
		if err := c.Barrier(ctx); err != nil {
			return nil, fmt.Errorf("check: after round %d: %w", i, err)
		}
	}
	var row coll.BenchRow
	bc := coll.BenchConfig{Collective: algo.AllReduce, MinBytes: cfg.AllReduceBytes, MaxBytes: cfg.AllReduceBytes, Factor: 2,
		Iters: cfg.AllReduceIters, Warmup: 2, Check: true, DType: reduce.Float32, Op: reduce.Sum}
	if err := c.Bench(ctx, bc, func(r coll.BenchRow) { row = r }); err != nil {
		return nil, fmt.Errorf("check: all_reduce of %d bytes: %w", cfg.AllReduceBytes, err)
	}
	recs, err := gather(ctx, c, rec)
	if err != nil || me != 0 {
		return nil, err
	}
	f := assemble(recs, cfg)
	f.AllReduce = AllReduce{Bytes: row.Size, TimeUs: (row.OOPTime + row.IPTime) / 2, AlgBW: (row.OOPAlgBW + row.IPAlgBW) / 2,
		BusBW: (row.OOPBusBW + row.IPBusBW) / 2, Wrong: row.OOPWrong + row.IPWrong}
	return f, nil
}

// rankRecord is what a rank measured, sent to rank 0 as JSON.
type rankRecord struct {
	Rank  int          `json:"rank"`
	Host  string       `json:"host"`
	Peers []peerRecord `json:"peers"` // by peer rank
}

// peerRecord is a rank's figures with one peer: the bandwidth it sent
// at, and for the lower rank of the pair the latency.
type peerRecord struct {
	Transport string  `json:"transport"`
	BWTo      float64 `json:"bw_to"`
	LatUs     float64 `json:"lat_us"`
}

type measurer struct {
	c          *coll.Comm
	cfg        Config
	big, small []byte
}

func (m *measurer) send(ctx context.Context, b []byte, peer int) error {
	return m.c.Send(ctx, b, len(b), reduce.Uint8, peer)
}

func (m *measurer) recv(ctx context.Context, b []byte, peer int) error {
	return m.c.Recv(ctx, b, len(b), reduce.Uint8, peer)
}

// pair runs this rank's side of the tests with peer.
func (m *measurer) pair(ctx context.Context, peer int) (peerRecord, error) {
	first := m.c.Rank() < peer
	pr := peerRecord{Transport: m.c.Transport(peer)}
	// ping sends a then waits for b; pong the other way round.
	ping := func(a, b []byte) error {
		if err := m.send(ctx, a, peer); err != nil {
			return err
		}
		return m.recv(ctx, b, peer)
	}
	pong := func(a, b []byte) error {
		if err := m.recv(ctx, a, peer); err != nil {
			return err
		}
		return m.send(ctx, b, peer)
	}
	for range m.cfg.Warmup {
		var err error
		if first {
			err = ping(m.big, m.big)
		} else {
			err = pong(m.big, m.big)
		}
		if err != nil {
			return pr, fmt.Errorf("warm-up: %w", err)
		}
	}
	stream := func() (float64, error) {
		start := time.Now()
		for range m.cfg.Iters {
			if err := m.send(ctx, m.big, peer); err != nil {
				return 0, err
			}
		}
		if err := m.recv(ctx, m.small, peer); err != nil {
			return 0, err
		}
		return gbs(m.cfg.Bytes*int64(m.cfg.Iters), time.Since(start)), nil
	}
	sink := func() error {
		for range m.cfg.Iters {
			if err := m.recv(ctx, m.big, peer); err != nil {
				return err
			}
		}
		return m.send(ctx, m.small, peer)
	}
	for turn := range 2 {
		runs := make([]float64, 0, m.cfg.Repeats)
		for range m.cfg.Repeats {
			var err error
			var bw float64
			if first == (turn == 0) {
				bw, err = stream()
				runs = append(runs, bw)
			} else {
				err = sink()
			}
			if err != nil {
				return pr, fmt.Errorf("bandwidth: %w", err)
			}
		}
		if len(runs) > 0 {
			pr.BWTo = slices.Max(runs)
		}
	}
	warm := m.cfg.LatIters / 10
	rtt := make([]time.Duration, 0, m.cfg.LatIters)
	for i := range warm + m.cfg.LatIters {
		if !first {
			if err := pong(m.small, m.small); err != nil {
				return pr, fmt.Errorf("latency: %w", err)
			}
			continue
		}
		start := time.Now()
		if err := ping(m.small, m.small); err != nil {
			return pr, fmt.Errorf("latency: %w", err)
		}
		if i >= warm {
			rtt = append(rtt, time.Since(start))
		}
	}
	if first {
		slices.Sort(rtt)
		pr.LatUs = float64(rtt[len(rtt)/2]) / 2 / float64(time.Microsecond)
	}
	return pr, nil
}

// gbs is bytes over d in GB/s.
func gbs(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		d = 1
	}
	return float64(bytes) / d.Seconds() / 1e9
}

// gather brings every rank's record to rank 0 (the others get nil): a
// length, then the JSON, from each rank in turn.
func gather(ctx context.Context, c *coll.Comm, rec rankRecord) ([]rankRecord, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	var hdr [8]byte
	if c.Rank() != 0 {
		binary.LittleEndian.PutUint64(hdr[:], uint64(len(b)))
		if err := c.Send(ctx, hdr[:], len(hdr), reduce.Uint8, 0); err != nil {
			return nil, fmt.Errorf("check: gather: %w", err)
		}
		if err := c.Send(ctx, b, len(b), reduce.Uint8, 0); err != nil {
			return nil, fmt.Errorf("check: gather: %w", err)
		}
		return nil, nil
	}
	recs := make([]rankRecord, c.Size())
	recs[0] = rec
	for r := 1; r < c.Size(); r++ {
		if err := c.Recv(ctx, hdr[:], len(hdr), reduce.Uint8, r); err != nil {
			return nil, fmt.Errorf("check: gather from rank %d: %w", r, err)
		}
		k := binary.LittleEndian.Uint64(hdr[:])
		if k > 64<<20 {
			return nil, fmt.Errorf("check: gather from rank %d: a record of %d bytes", r, k)
		}
		buf := make([]byte, k)
		if err := c.Recv(ctx, buf, len(buf), reduce.Uint8, r); err != nil {
			return nil, fmt.Errorf("check: gather from rank %d: %w", r, err)
		}
		if err := json.Unmarshal(buf, &recs[r]); err != nil || recs[r].Rank != r || len(recs[r].Peers) != c.Size() {
			return nil, fmt.Errorf("check: gather from rank %d: a bad record (%v)", r, err)
		}
	}
	return recs, nil
}

// assemble makes the figures from every rank's record.
func assemble(recs []rankRecord, cfg Config) *Figures {
	n := len(recs)
	ts := map[string]bool{}
	var pairs []Pair
	for a := range n {
		for b := a + 1; b < n; b++ {
			pa, pb := recs[a].Peers[b], recs[b].Peers[a]
			pairs = append(pairs, Pair{A: a, B: b, Transport: pa.Transport, BWAB: pa.BWTo, BWBA: pb.BWTo, LatUs: pa.LatUs})
			ts[pa.Transport] = true
		}
	}
	names := make([]string, 0, len(ts))
	for t := range ts {
		names = append(names, t)
	}
	sort.Strings(names)
	f := newFigures(Shape{Ranks: n, Transport: strings.Join(names, ","), Config: cfg})
	f.Pairs = pairs
	for _, r := range recs {
		f.Hosts = append(f.Hosts, r.Host)
	}
	return f
}
