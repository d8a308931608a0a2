package kv_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ibex-rdma/ibex/kv"
)

// The race check: writers PUT values that say which key and version they
// are (and carry a checksum of their body), with versions that only go
// up; readers GET and check that every value is whole and is not older
// than the newest version whose PUT completed before the GET started.
// The progress table (per key: the version last started, the version last
// completed) lives in memory the writers and readers share: a Go slice in
// one process, a shared mapping across processes.

// progress is two uint64 words per key: started, completed.
type progress []uint64

func (p progress) word(i int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&p[i]))
}
func (p progress) started(k int) *atomic.Uint64   { return p.word(2 * k) }
func (p progress) completed(k int) *atomic.Uint64 { return p.word(2*k + 1) }

func progressOf(b []byte) progress {
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), len(b)/8)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func raceKey(k int) []byte { return []byte(fmt.Sprintf("race-key-%05d", k)) }

// sizeFor is the value size of key k's version v: 1 byte to past 1 MiB,
// the large ones on few keys so that the arena holds them.
func sizeFor(k int, v uint64) int {
	small := [...]int{1, 5, 23, 24, 100, 1000, 4096, 5000, 17000}
	large := [...]int{70000, 1<<20 + 3, 100, 5}
	i := int(v*2654435761>>7) + k
	if k%64 == 0 {
		return large[i%len(large)]
	}
	return small[i%len(small)]
}

// fill writes key k's version v's bytes into b (len(b) = sizeFor).
func fill(b []byte, k int, v uint64) {
	r := rand.NewPCG(uint64(k), v)
	for i := 0; i < len(b); i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		copy(b[i:], w[:])
	}
	if len(b) >= 24 {
		binary.LittleEndian.PutUint64(b[0:], v)
		binary.LittleEndian.PutUint32(b[8:], uint32(k))
		binary.LittleEndian.PutUint32(b[12:], uint32(len(b)))
		binary.LittleEndian.PutUint32(b[16:], crc32.Checksum(b[24:], castagnoli))
		binary.LittleEndian.PutUint32(b[20:], crc32.Checksum(b[:20], castagnoli))
	}
}

// versionOf says which version of key k the value b is, looking among
// [lo, hi] for the small ones, which do not say.
func versionOf(b []byte, k int, lo, hi uint64, scratch []byte) (uint64, error) {
	if len(b) >= 24 {
		if crc32.Checksum(b[:20], castagnoli) != binary.LittleEndian.Uint32(b[20:]) {
			return 0, fmt.Errorf("header checksum fails")
		}
		v := binary.LittleEndian.Uint64(b)
		if int(binary.LittleEndian.Uint32(b[8:])) != k || int(binary.LittleEndian.Uint32(b[12:])) != len(b) || sizeFor(k, v) != len(b) {
			return 0, fmt.Errorf("version %d of key %d, %d bytes: another key's or length", v, binary.LittleEndian.Uint32(b[8:]), len(b))
		}
		if crc32.Checksum(b[24:], castagnoli) != binary.LittleEndian.Uint32(b[16:]) {
			return 0, fmt.Errorf("version %d: body checksum fails (torn)", v)
		}
		return v, nil
	}
	for v := hi; v >= lo && v > 0; v-- {
		if sizeFor(k, v) == len(b) {
			fill(scratch[:len(b)], k, v)
			if string(scratch[:len(b)]) == string(b) {
				return v, nil
			}
		}
	}
	return 0, fmt.Errorf("%d bytes %x: no version in [%d, %d]", len(b), b, lo, hi)
}

// writeLoop PUTs keys [from, to) in turn, each with its next version,
// until ctx ends.
func writeLoop(ctx context.Context, c *kv.Client, p progress, from, to int) (int, error) {
	buf := make([]byte, 1<<20+8)
	n := 0
	for ctx.Err() == nil {
		for k := from; k < to && ctx.Err() == nil; k++ {
			v := p.started(k).Load() + 1
			b := buf[:sizeFor(k, v)]
			fill(b, k, v)
			p.started(k).Store(v)
			if err := c.Put(ctx, raceKey(k), b); err != nil {
				if ctx.Err() != nil {
					return n, nil
				}
				return n, fmt.Errorf("put key %d version %d: %w", k, v, err)
			}
			p.completed(k).Store(v)
			n++
		}
	}
	return n, nil
}

// readLoop GETs random keys in pipelined batches until ctx ends and
// checks each value.
func readLoop(ctx context.Context, c *kv.Client, p progress, nkeys int, seed uint64, checked *atomic.Int64) (int, error) {
	const batch = 16
	r := rand.New(rand.NewPCG(seed, 7))
	ops := make([]kv.Op, batch)
	keys := make([]int, batch)
	mins := make([]uint64, batch)
	for i := range ops {
		ops[i].Value = make([]byte, 1<<20+8)
	}
	scratch := make([]byte, 64)
	n := 0
	for ctx.Err() == nil {
		for i := range ops {
			k := r.IntN(nkeys)
			keys[i] = k
			mins[i] = p.completed(k).Load()
			ops[i].Kind, ops[i].Key = kv.OpGet, raceKey(k)
		}
		if err := c.Do(ctx, ops); err != nil {
			if ctx.Err() != nil {
				return n, nil
			}
			return n, err
		}
		for i := range ops {
			o, k := &ops[i], keys[i]
			hi := p.started(k).Load()
			switch {
			case o.Err != nil:
				return n, fmt.Errorf("get key %d: %w", k, o.Err)
			case !o.Found && mins[i] > 0:
				return n, fmt.Errorf("get key %d: not found, but version %d was stored before", k, mins[i])
			case !o.Found:
				continue
			}
			v, err := versionOf(o.Value[:o.N], k, mins[i], hi, scratch)
			if err != nil {
				return n, fmt.Errorf("get key %d: %v", k, err)
			}
			if v < mins[i] || v > hi {
				return n, fmt.Errorf("get key %d: version %d, but %d had completed before the GET and %d is the newest started", k, v, mins[i], hi)
			}
			n++
			checked.Add(1)
		}
	}
	return n, nil
}

// raceRun runs writers and readers against srvAddr, all in this process,
// for d and then until enough says so (at most raceMax): a loaded host
// still checks as much.
func raceRun(t *testing.T, addr, device string, p progress, nkeys, writers, readers int, d time.Duration, enough func(gets int64) bool) {
	t.Helper()
	for _, err := range raceErrs(t, addr, device, p, nkeys, writers, readers, d, enough) {
		t.Error(err)
	}
}

const raceMax = 10 * time.Second

// raceErrs runs the race check and returns what it found wrong.
func raceErrs(t *testing.T, addr, device string, p progress, nkeys, writers, readers int, d time.Duration, enough func(gets int64) bool) []error {
	ctx, cancel := context.WithTimeout(context.Background(), raceMax)
	defer cancel()
	var gets atomic.Int64
	go func() {
		start := time.Now()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if time.Since(start) >= d && (enough == nil || enough(gets.Load())) {
				cancel()
				return
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, writers+readers)
	var puts atomic.Int64
	var clients []*kv.Client
	for i := 0; i < writers+readers; i++ {
		clients = append(clients, dial(t, kv.ClientConfig{Server: addr, Device: device, Pipeline: 16}))
	}
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := writeLoop(ctx, clients[w], p, w*nkeys/writers, (w+1)*nkeys/writers)
			puts.Add(int64(n))
			if err != nil {
				errs <- err
				cancel()
			}
		}()
	}
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := readLoop(ctx, clients[writers+r], p, nkeys, uint64(r), &gets)
			if err != nil {
				errs <- err
				cancel()
			}
		}()
	}
	wg.Wait()
	close(errs)
	var found []error
	for err := range errs {
		found = append(found, err)
	}
	var cs kv.ClientStats
	for _, c := range clients[writers:] {
		s := c.Stats()
		cs.CacheHits += s.CacheHits
		cs.CacheStale += s.CacheStale
		cs.TornBuckets += s.TornBuckets
		cs.TornEntries += s.TornEntries
		cs.StaleEntries += s.StaleEntries
		cs.HeaderReads += s.HeaderReads
	}
	t.Logf("%d PUTs, %d GETs checked; readers: cache hits %d, stale cache %d, torn buckets %d, torn entries %d, stale entries %d, header reads %d",
		puts.Load(), gets.Load(), cs.CacheHits, cs.CacheStale, cs.TornBuckets, cs.TornEntries, cs.StaleEntries, cs.HeaderReads)
	if gets.Load() == 0 || (writers > 0 && puts.Load() == 0) {
		found = append(found, fmt.Errorf("nothing checked: %d PUTs, %d GETs", puts.Load(), gets.Load()))
	}
	return found
}

// TestRace: writers and one-sided readers racing in one process over
// loop0 (run it with -race), with the table growing from 16 buckets
// under them and freed entries reused after 1 ms.
func TestRace(t *testing.T) {
	const nkeys = 700
	srv := startServer(t, kv.ServerConfig{Device: "loop0", Buckets: 16, LoadFactor: 0.3, Quarantine: time.Millisecond, Values: 64 << 20, MaxValue: 1<<20 + 64})
	p := make(progress, 2*nkeys)
	raceRun(t, srv.Addr(), "loop0", p, nkeys, 2, 2, 2*time.Second, func(gets int64) bool { return gets >= 1000 && srv.Stats().Resizes >= 3 })
	st := srv.Stats()
	t.Logf("server: %d puts, %d resizes, %d buckets, %d keys", st.Puts, st.Resizes, st.Buckets, st.Keys)
	if st.Resizes < 3 {
		t.Errorf("%d resizes during the race, want ≥ 3", st.Resizes)
	}
}

// TestRaceCatchesStale: the check is strong enough to see a server that
// forgets to mark superseded entries dead (a reader going straight to
// the entry it cached then returns an older value).
func TestRaceCatchesStale(t *testing.T) {
	t.Cleanup(kv.SetFaultNoDeadMark()) // after the server's cleanup
	const nkeys = 50
	srv := startServer(t, kv.ServerConfig{Device: "loop0", Values: 64 << 20, MaxValue: 1<<20 + 64})
	p := make(progress, 2*nkeys)
	errs := raceErrs(t, srv.Addr(), "loop0", p, nkeys, 1, 2, 2*time.Second, nil)
	if len(errs) == 0 {
		t.Fatal("the race check found nothing wrong with a server that leaves superseded entries live")
	}
	t.Logf("caught: %v", errs[0])
}
