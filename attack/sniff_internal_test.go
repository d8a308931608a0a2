package attack

import (
	"testing"
	"time"
)

// TestSnifferIndices: marks stay valid across Forget, Since clamps an index
// of forgotten packets, and Wait finds a packet stored after it started.
func TestSnifferIndices(t *testing.T) {
	s := &Sniffer{wake: make(chan struct{}, 1)}
	add := func(psn uint32) {
		s.mu.Lock()
		s.seen = append(s.seen, Seen{})
		s.seen[len(s.seen)-1].BTH.PSN = psn
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	add(1)
	add(2)
	m := s.Mark()
	s.Forget()
	if s.Mark() != m || m != 2 {
		t.Fatalf("mark %d after forget, %d before", s.Mark(), m)
	}
	add(3)
	got, next := s.Since(0)
	if len(got) != 1 || got[0].BTH.PSN != 3 || next != 3 {
		t.Fatalf("Since(0) after forget: %d packets, next %d", len(got), next)
	}
	go func() {
		time.Sleep(time.Millisecond)
		add(4)
	}()
	v, next, ok := s.Wait(next, 10*time.Second, func(x *Seen) bool { return x.BTH.PSN == 4 })
	if !ok || v.BTH.PSN != 4 || next != 4 {
		t.Fatalf("Wait: %v %d %v", v.BTH.PSN, next, ok)
	}
}
