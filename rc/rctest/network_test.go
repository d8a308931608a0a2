package rctest

import (
	"bytes"
	"fmt"
	"math/bits"
	"net/netip"
	"testing"
	"time"
)

var addrA, addrB = netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791")

func datagrams(n int) [][]byte {
	var out [][]byte
	for i := range n {
		out = append(out, []byte(fmt.Sprintf("datagram %04d", i)))
	}
	return out
}

// recvAll receives everything due at b.
func recvAll(b *Endpoint) [][]byte {
	bufs, sizes, from := make([][]byte, 16), make([]int, 16), make([]netip.AddrPort, 16)
	for i := range bufs {
		bufs[i] = make([]byte, 64)
	}
	var out [][]byte
	for {
		n := b.Recv(bufs, sizes, from)
		if n == 0 {
			return out
		}
		for i := range n {
			out = append(out, bytes.Clone(bufs[i][:sizes[i]]))
		}
	}
}

func TestZeroFaultsIsPerfect(t *testing.T) {
	n := NewNetwork(1, Faults{})
	a, b := n.Endpoint(addrA), n.Endpoint(addrB)
	want := datagrams(100)
	a.Send(addrB, want)
	if at, ok := n.Next(); !ok || at != 0 {
		t.Fatalf("Next = %d, %v; want 0, true", at, ok)
	}
	got := recvAll(b)
	if len(got) != len(want) {
		t.Fatalf("received %d of %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("datagram %d: %q, want %q", i, got[i], want[i])
		}
	}
	if _, ok := n.Next(); ok {
		t.Error("Next reports a datagram after all were received")
	}
	if s := n.Stats(); s != (NetStats{Sent: 100, Received: 100}) {
		t.Errorf("stats %+v", s)
	}
}

func TestRecvFillsAddressesAndTruncates(t *testing.T) {
	n := NewNetwork(1, Faults{})
	a, b := n.Endpoint(addrA), n.Endpoint(addrB)
	a.Send(addrB, [][]byte{[]byte("0123456789")})
	buf, sizes, from := [][]byte{make([]byte, 4)}, []int{0}, []netip.AddrPort{{}}
	if k := b.Recv(buf, sizes, from); k != 1 || sizes[0] != 4 || string(buf[0]) != "0123" || from[0] != addrA {
		t.Errorf("Recv = %d, size %d, %q from %v", k, sizes[0], buf[0], from[0])
	}
	a.Send(netip.MustParseAddrPort("10.0.0.9:4791"), datagrams(1))
	if s := n.Stats(); s.Unroutable != 1 {
		t.Errorf("unroutable %d, want 1", s.Unroutable)
	}
}

// received runs 2,000 datagrams from a to b under f and returns what b
// received, as it arrived.
func received(seed uint64, f Faults) ([][]byte, NetStats) {
	n := NewNetwork(seed, f)
	a, b := n.Endpoint(addrA), n.Endpoint(addrB)
	var got [][]byte
	for i, d := range datagrams(2000) {
		n.Advance(int64(i) * 1000)
		a.Send(addrB, [][]byte{d})
		got = append(got, recvAll(b)...)
	}
	for {
		at, ok := n.Next()
		if !ok {
			break
		}
		n.Advance(at)
		got = append(got, recvAll(b)...)
	}
	return got, n.Stats()
}

func TestFaultsFollowTheSeed(t *testing.T) {
	f := Faults{Loss: 0.1, Dup: 0.1, Corrupt: 0.1, MinDelay: 5000, Jitter: 20000}
	x, _ := received(7, f)
	y, _ := received(7, f)
	z, _ := received(8, f)
	if fmt.Sprint(x) != fmt.Sprint(y) {
		t.Error("the same seed gave two different runs")
	}
	if fmt.Sprint(x) == fmt.Sprint(z) {
		t.Error("two seeds gave the same run")
	}
}

func TestFaultRates(t *testing.T) {
	f := Faults{Loss: 0.1, Dup: 0.05, Corrupt: 0.2, MinDelay: 3000, Jitter: 30000}
	got, s := received(3, f)
	near := func(what string, n uint64, p float64, of uint64) {
		t.Helper()
		if want := p * float64(of); float64(n) < 0.8*want || float64(n) > 1.2*want {
			t.Errorf("%s: %d of %d, want about %.0f", what, n, of, want)
		}
	}
	near("lost", s.Lost, f.Loss, s.Sent)
	near("duplicated", s.Duplicated, f.Dup, s.Sent-s.Lost)
	near("corrupted", s.Corrupted, f.Corrupt, s.Received)
	if uint64(len(got)) != s.Received || s.Received != s.Sent-s.Lost+s.Duplicated {
		t.Errorf("received %d (stats %+v)", len(got), s)
	}
	reordered := false
	for i := 1; i < len(got); i++ {
		reordered = reordered || string(got[i]) < string(got[i-1])
	}
	if !reordered {
		t.Error("jitter of 10 sending intervals reordered nothing")
	}
}

// TestCorruption: a corrupted copy differs from what was sent in exactly
// one bit.
func TestCorruption(t *testing.T) {
	n := NewNetwork(1, Faults{Corrupt: 0.3})
	a, b := n.Endpoint(addrA), n.Endpoint(addrB)
	const d = "the same datagram"
	for range 1000 {
		a.Send(addrB, [][]byte{[]byte(d)})
	}
	flipped := 0
	for _, g := range recvAll(b) {
		switch {
		case string(g) == d:
		case len(g) == len(d) && hamming(string(g), d) == 1:
			flipped++
		default:
			t.Fatalf("received %q", g)
		}
	}
	if s := n.Stats(); uint64(flipped) != s.Corrupted || flipped < 200 || flipped > 400 {
		t.Errorf("%d copies with one bit flipped, %d corrupted, of 1000", flipped, s.Corrupted)
	}
}

func hamming(a, b string) int {
	d := 0
	for i := range a {
		d += bits.OnesCount8(a[i] ^ b[i])
	}
	return d
}

func TestDelay(t *testing.T) {
	n := NewNetwork(1, Faults{MinDelay: 5000, Jitter: 1000})
	a, b := n.Endpoint(addrA), n.Endpoint(addrB)
	a.Send(addrB, datagrams(50))
	at, ok := b.Next()
	if !ok || at < 5000 || at > 6000 {
		t.Fatalf("first arrival at %d, %v", at, ok)
	}
	n.Advance(4999)
	if got := recvAll(b); len(got) != 0 {
		t.Fatalf("%d datagrams before the minimum delay", len(got))
	}
	n.Advance(6000)
	if got := recvAll(b); len(got) != 50 {
		t.Fatalf("%d of 50 datagrams after the delay and jitter", len(got))
	}
}

func TestPartitions(t *testing.T) {
	n := NewNetwork(1, Faults{Partitions: []Window{{From: 100, To: 200}}})
	a, b := n.Endpoint(addrA), n.Endpoint(addrB)
	count := func() int { return len(recvAll(b)) }
	for _, c := range []struct {
		at   int64
		cut  bool
		want int
	}{{99, false, 1}, {100, false, 0}, {199, false, 0}, {200, false, 1}, {300, true, 0}, {400, false, 1}} {
		n.Advance(c.at)
		if c.cut {
			n.Partition()
		}
		a.Send(addrB, datagrams(1))
		if got := count(); got != c.want {
			t.Errorf("at %d (cut %v): %d received, want %d", c.at, c.cut, got, c.want)
		}
		n.Heal()
	}
	if s := n.Stats(); s.Partitioned != 3 {
		t.Errorf("%d partitioned, want 3", s.Partitioned)
	}
}

func TestHold(t *testing.T) {
	n := NewNetwork(1, Faults{Hold: true})
	a, b := n.Endpoint(addrA), n.Endpoint(addrB)
	a.Send(addrB, datagrams(3))
	n.Advance(1e9)
	if got := recvAll(b); len(got) != 0 {
		t.Fatalf("%d held datagrams delivered by time", len(got))
	}
	h := n.Held()
	if len(h) != 3 || h[0].ID != 1 || h[2].ID != 3 || h[1].From != addrA || h[1].To != addrB {
		t.Fatalf("held %+v", h)
	}
	dup, ok := n.Duplicate(2)
	if !ok || dup != 4 {
		t.Fatalf("Duplicate(2) = %d, %v", dup, ok)
	}
	if !n.Drop(1) || n.Drop(1) {
		t.Fatal("Drop(1) twice did not succeed once")
	}
	for _, id := range []uint64{4, 3, 2} {
		if !n.Deliver(id) {
			t.Fatalf("Deliver(%d) failed", id)
		}
	}
	got := recvAll(b)
	if fmt.Sprintf("%s", got) != "[datagram 0001 datagram 0002 datagram 0001]" {
		t.Errorf("delivered %s", got)
	}
	if n.Deliver(4) || len(n.Held()) != 0 {
		t.Error("a delivered datagram is still held")
	}
}

// TestNotify: an Endpoint is usable as a provider's socket from another
// goroutine, waiting on Notify between non-blocking Recvs.
func TestNotify(t *testing.T) {
	n := NewNetwork(1, Faults{MinDelay: 10})
	a, b := n.Endpoint(addrA), n.Endpoint(addrB)
	done := make(chan [][]byte)
	go func() {
		var got [][]byte
		for len(got) < 100 {
			select {
			case <-b.Notify():
				got = append(got, recvAll(b)...)
			case <-time.After(10 * time.Second):
				done <- got
				return
			}
		}
		done <- got
	}()
	for i, d := range datagrams(100) {
		a.Send(addrB, [][]byte{d})
		n.Advance(int64(i+1) * 10)
	}
	if got := <-done; len(got) != 100 {
		t.Fatalf("the waiting receiver got %d of 100", len(got))
	}
}

func TestTap(t *testing.T) {
	n := NewNetwork(1, Faults{Loss: 0.5, Dup: 0.5})
	a, _ := n.Endpoint(addrA), n.Endpoint(addrB)
	count := map[Fate]int{}
	n.Tap(func(d *Datagram, f Fate) {
		count[f]++
		if (f != Queued && f != Held) != (d.ID == 0) || d.From != addrA || len(d.Data) != len("datagram 0000") {
			t.Errorf("tapped %v: %+v", f, d)
		}
		n.Stats() // the tap may call the network
	})
	a.Send(addrB, datagrams(1000))
	a.Send(netip.MustParseAddrPort("10.0.0.3:4791"), datagrams(1))
	s := n.Stats()
	if uint64(count[Lost]) != s.Lost || uint64(count[Queued]) != s.Sent-s.Lost-1+s.Duplicated || count[Unroutable] != 1 {
		t.Errorf("tapped %v, stats %+v", count, s)
	}
}

// TestBottleneck: datagrams to one endpoint queue behind each other at the
// link's rate; above MarkAbove bytes waiting they arrive CE-marked, and one
// that would overflow Queue is dropped. Two senders share the link.
func TestBottleneck(t *testing.T) {
	n := NewNetwork(1, Faults{MinDelay: 100, Bottleneck: Bottleneck{Rate: 1e9, Queue: 3000, MarkAbove: 1000}})
	a, b := n.Endpoint(addrA), n.Endpoint(addrB)
	c := n.Endpoint(netip.MustParseAddrPort("10.0.0.3:4791"))
	kb := func(tag byte) []byte { return bytes.Repeat([]byte{tag}, 1000) }
	a.Send(addrB, [][]byte{kb(1), kb(2)})
	c.Send(addrB, [][]byte{kb(3), kb(4)})
	a.Send(addrB, [][]byte{kb(5)})
	st := n.Stats()
	if st.Overflowed != 2 || st.Marked != 1 {
		t.Fatalf("stats %+v, want 2 overflowed (the 4th and 5th: 3000 bytes waiting), 1 marked (the 3rd: 2000 waiting)", st)
	}
	// At 1 byte/ns the three that fit leave the link at 1, 2 and 3 µs and
	// arrive 100 ns later.
	bufs, sizes, ce := [][]byte{make([]byte, 1000)}, []int{0}, []bool{false}
	for i, want := range []struct {
		at  int64
		tag byte
		ce  bool
	}{{1100, 1, false}, {2100, 2, false}, {3100, 3, true}} {
		if at, ok := b.Next(); !ok || at != want.at {
			t.Fatalf("datagram %d due at %d (%v), want %d", i, at, ok, want.at)
		}
		n.Advance(want.at)
		if k := b.RecvCE(bufs, sizes, nil, ce); k != 1 || bufs[0][0] != want.tag || ce[0] != want.ce {
			t.Fatalf("datagram %d: got %d, tag %d, CE %v; want tag %d, CE %v", i, k, bufs[0][0], ce[0], want.tag, want.ce)
		}
	}
	// The queue has drained: the link is idle again, nothing is marked.
	n.Advance(10_000)
	a.Send(addrB, [][]byte{kb(6)})
	n.Advance(11_100)
	if k := b.RecvCE(bufs, sizes, nil, ce); k != 1 || bufs[0][0] != 6 || ce[0] {
		t.Fatalf("after the queue drained: got %d, tag %d, CE %v", k, bufs[0][0], ce[0])
	}
}

// TestMark: a held datagram marked CE arrives marked.
func TestMark(t *testing.T) {
	n := NewNetwork(1, Faults{Hold: true})
	a, b := n.Endpoint(addrA), n.Endpoint(addrB)
	a.Send(addrB, datagrams(2))
	h := n.Held()
	if !n.Mark(h[1].ID) || n.Mark(999) {
		t.Fatal("Mark of a held datagram failed, or of an unknown one succeeded")
	}
	n.Deliver(h[0].ID)
	n.Deliver(h[1].ID)
	bufs, sizes, ce := [][]byte{make([]byte, 64), make([]byte, 64)}, []int{0, 0}, []bool{false, false}
	if k := b.RecvCE(bufs, sizes, nil, ce); k != 2 || ce[0] || !ce[1] {
		t.Fatalf("got %d, CE %v", k, ce)
	}
	if st := n.Stats(); st.Marked != 1 {
		t.Fatalf("marked %d", st.Marked)
	}
}
