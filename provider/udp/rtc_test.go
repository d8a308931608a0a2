package udp

import (
	"context"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// TestRunToCompletion: two goroutines ping-pong 8-byte WRITE_WITH_IMMs,
// each spinning on its own CQ's Poll as perftest's send_lat does. The
// pollers run the transport themselves: nearly every message is received
// in a poller's pass, not by a device's progress goroutine, and that
// goroutine is not woken per message.
func TestRunToCompletion(t *testing.T) {
	x, y := ioPair(t, 64, 16, nil, nil)
	const rounds = 2000
	wr := func(from, to *ioEnd) []verbs.SendWR {
		return []verbs.SendWR{{Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
			SGL:        []verbs.SGE{{Addr: from.mr.Addr(), Length: 8, LKey: from.mr.LKey()}},
			RemoteAddr: to.mr.Addr(), RKey: to.mr.RKey()}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// side posts first (if it starts) and then answers every message
	// that arrives, rounds times; it spins on Poll, never waits.
	side := func(me, peer *ioEnd, starts bool, errc chan<- error) {
		w, wc := wr(me, peer), make([]verbs.WC, 4)
		for range 8 {
			if err := me.qp.PostRecv([]verbs.RecvWR{{}}); err != nil {
				errc <- err
				return
			}
		}
		sent, got := 0, 0
		if starts {
			if err := me.qp.PostSend(w); err != nil {
				errc <- err
				return
			}
			sent++
		}
		for got < rounds {
			n, err := me.cq.Poll(wc)
			if err != nil {
				errc <- err
				return
			}
			for _, c := range wc[:n] {
				if c.Status != verbs.WCSuccess {
					errc <- &wcError{c}
					return
				}
				if c.Opcode != verbs.WCRecvRDMAWithImm {
					continue
				}
				got++
				if err := me.qp.PostRecv([]verbs.RecvWR{{}}); err != nil {
					errc <- err
					return
				}
				if sent < rounds {
					if err := me.qp.PostSend(w); err != nil {
						errc <- err
						return
					}
					sent++
				}
			}
			if ctx.Err() != nil {
				errc <- ctx.Err()
				return
			}
		}
		errc <- nil
	}
	errc := make(chan error, 2)
	go side(x, y, true, errc)
	go side(y, x, false, errc)
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []*ioEnd{x, y} {
		c := &e.dev().ctrs
		in, loop, hand := c.inlineRcv.Load(), c.loopRcv.Load(), c.handoffs.Load()
		t.Logf("%s: %d messages received by pollers, %d by the progress goroutine, %d hand-offs, %d round trips",
			e.name, in, loop, hand, rounds)
		if in < 9*(in+loop)/10 {
			t.Errorf("%s: pollers received %d of %d messages, want at least 90%%", e.name, in, in+loop)
		}
		if hand > rounds/10 {
			t.Errorf("%s: %d hand-offs to the progress goroutine in %d round trips, want at most %d", e.name, hand, rounds, rounds/10)
		}
	}
}

type wcError struct{ wc verbs.WC }

func (e *wcError) Error() string { return "completion " + e.wc.Status.String() }
