package udp

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/rc/rctest"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/verbstest"
)

// Devices over an in-memory network (memconn_test.go): the whole provider
// but the socket — loop, engines, encoding, ICRC, demultiplexing — runs
// as it does over UDP.

var seedFlag = flag.Uint64("seed", 0, "seed of TestMemFaulty's network and workload (0: from the clock); the test logs the seed it used")

func memOpen(t testing.TB, name string) *verbs.Context {
	t.Helper()
	c, err := verbs.Open("udp/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestConformanceMem runs the verbs suite between two devices on a
// perfect in-memory network.
func TestConformanceMem(t *testing.T) {
	a, b := newMemNet(1, rctest.Faults{}).devices(t)
	verbstest.Run(t, verbstest.Config{
		Open: func(t testing.TB) (x, y *verbs.Context) { return memOpen(t, a), memOpen(t, b) },
	})
}

// memFaults is TestMemFaulty's network: a few percent of loss,
// duplication and corruption, and delays that reorder datagrams.
var memFaults = rctest.Faults{Loss: 0.02, Dup: 0.02, Corrupt: 0.005, MinDelay: 5e3, Jitter: 20e3}

// TestMemFaulty runs WRITEs, READs, SENDs and atomics of random sizes and
// offsets between two devices over a seeded faulty network, and checks
// every byte and every atomic's result against a model. The seed (-seed
// to choose it) draws the workload and the network's faults.
func TestMemFaulty(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-seed %d replays the workload and the faults' draws); %v", seed, seed, memFaults)
	mn := newMemNet(seed, memFaults)
	da, db := mn.devices(t)
	const size = 1 << 20
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	a, b := openEnd(t, da, size, 16, acc), openEnd(t, db, size, 16, acc)
	connectEnds(t, a, b)

	rng := rand.New(rand.NewPCG(seed, 0x66617574))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wc := make([]verbs.WC, 1)
	wait := func(cq *verbs.CQ, what string) verbs.WC {
		t.Helper()
		if k, err := cq.PollWait(ctx, wc); err != nil || k != 1 || wc[0].Status != verbs.WCSuccess {
			t.Fatalf("seed %d: %s: completion %v, %v", seed, what, wc[0], err)
		}
		return wc[0]
	}
	post := func(wr verbs.SendWR) {
		t.Helper()
		if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
	}
	sge := func(e *ioEnd, off, n int) []verbs.SGE {
		return []verbs.SGE{{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}}
	}
	// The last 4 KiB of b's MR are the atomics' counters, of a's their
	// results; the rest carries data.
	const data, words = size - 4096, 4096 / 8
	var model [words]uint64
	src, dst := a.mr.Bytes(), b.mr.Bytes()
	for round := range 40 {
		n := 1 + rng.IntN(64<<10)
		off := rng.IntN(data - n + 1)
		for i := range src[off : off+n] {
			src[off+i] = byte(rng.Uint32())
		}
		post(a.write(b, off, n))
		wait(a.cq, "WRITE")
		if !bytes.Equal(dst[off:off+n], src[off:off+n]) {
			t.Fatalf("seed %d: round %d: WRITE of %d bytes at %d: data differs", seed, round, n, off)
		}

		clear(src[off : off+n])
		post(a.read(b, off, n))
		wait(a.cq, "READ")
		if !bytes.Equal(src[off:off+n], dst[off:off+n]) {
			t.Fatalf("seed %d: round %d: READ of %d bytes at %d: data differs", seed, round, n, off)
		}

		m := 1 + rng.IntN(20<<10)
		from, to := rng.IntN(data-m+1), rng.IntN(data-m+1)
		for i := range src[from : from+m] {
			src[from+i] = byte(rng.Uint32())
		}
		if err := b.qp.PostRecv([]verbs.RecvWR{{ID: uint64(round), SGL: sge(b, to, m)}}); err != nil {
			t.Fatal(err)
		}
		post(verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: sge(a, from, m)})
		wait(a.cq, "SEND")
		if got := wait(b.cq, "receive"); got.ByteLen != uint32(m) || got.WRID != uint64(round) {
			t.Fatalf("seed %d: round %d: receive %v, want wr %d of %d bytes", seed, round, got, round, m)
		}
		if !bytes.Equal(dst[to:to+m], src[from:from+m]) {
			t.Fatalf("seed %d: round %d: SEND of %d bytes: data differs", seed, round, m)
		}

		w := rng.IntN(words)
		res := data + 8*(round%words)
		roff := data + 8*w
		if rng.IntN(2) == 0 {
			add := rng.Uint64N(1000)
			post(verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGL: sge(a, res, 8),
				RemoteAddr: b.mr.Addr() + uint64(roff), RKey: b.mr.RKey(), CompareAdd: add})
			wait(a.cq, "fetch-add")
			if got := binary.NativeEndian.Uint64(src[res:]); got != model[w] {
				t.Fatalf("seed %d: round %d: fetch-add returned %d, want %d", seed, round, got, model[w])
			}
			model[w] += add
		} else {
			cmp, swap := model[w], rng.Uint64()
			if rng.IntN(3) == 0 {
				cmp++ // a compare that fails
			}
			post(verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled, SGL: sge(a, res, 8),
				RemoteAddr: b.mr.Addr() + uint64(roff), RKey: b.mr.RKey(), CompareAdd: cmp, Swap: swap})
			wait(a.cq, "compare-swap")
			if got := binary.NativeEndian.Uint64(src[res:]); got != model[w] {
				t.Fatalf("seed %d: round %d: compare-swap returned %d, want %d", seed, round, got, model[w])
			}
			if cmp == model[w] {
				model[w] = swap
			}
		}
		if got := binary.NativeEndian.Uint64(dst[roff:]); got != model[w] {
			t.Fatalf("seed %d: round %d: counter %d is %d, want %d", seed, round, w, got, model[w])
		}
	}

	st := mn.net.Stats()
	ca, cb := a.dev().counters(), b.dev().counters()
	qa, qb := a.qp.Stats(), b.qp.Stats()
	t.Logf("network: %d datagrams sent, %d lost, %d duplicated, %d corrupted", st.Sent, st.Lost, st.Duplicated, st.Corrupted)
	t.Logf("a: %d retransmits, %d sequence NAKs received; b: %d duplicates, %d out of sequence; receive errors %d+%d (ICRC %d+%d)",
		qa.Retransmits, qa.SeqNaksRecv, qb.Duplicates, qb.OutOfSequence, ca.PortRcvErrors, cb.PortRcvErrors, ca.ICRCErrors, cb.ICRCErrors)
	if st.Lost == 0 || st.Duplicated == 0 {
		t.Errorf("seed %d: the network lost %d and duplicated %d datagrams: the faults were not exercised", seed, st.Lost, st.Duplicated)
	}
}
