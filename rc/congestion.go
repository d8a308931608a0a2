package rc

// Congestion response: a send window per QP that reacts (AIMD), a Pacer per
// device for retransmissions, and ECN carried back as RoCEv2 CNPs.
//
// Why a window (AIMD) and not a DCQCN rate. The engine is sans-IO and
// clock-driven by its caller: a window needs no timer of its own (the ACKs
// clock it, as in TCP), while a rate needs a pacing timer per QP and a byte
// clock per packet the provider would have to honour. The losses seen here
// are a host's socket or CPU falling behind, not a switch buffer, and what
// matters is that a thousand QPs stop re-sending whole windows at once; a
// window gives that directly. DCQCN's useful part — the reaction to CNPs —
// is kept: a CNP cuts the window as it would cut the rate, at most once per
// round trip, and additive increase brings it back.
//
// The rules, per QP, in PSNs (cwnd, at most Config.Window):
//   - retransmit timeout: ssthresh = max(cwnd/2, 2), cwnd = 1: only the
//     oldest unacknowledged packet goes out again (TCP after an RTO), and
//     the window reopens as ACKs return: one more PSN per PSN acknowledged
//     up to ssthresh (slow start), then one per window's worth (additive
//     increase). A slow first ACK costs one packet per expiry, not a window.
//   - sequence NAK, CNP, or a CE-marked response: cwnd = ssthresh =
//     max(cwnd/2, 2), at most once per smoothed round trip (a burst of
//     marks is one congestion event).
//   - the last packet the window lets out asks for an acknowledgement, so a
//     small window always gets the ACK that reopens it.
//
// Across QPs: a Pacer limits the retransmitted packets per unit of time of
// all the engines that share it (one per device), so that QPs timing out
// together do not put their retransmissions ahead of the ACKs that would
// have stopped them. An engine the pacer refuses keeps the packet for
// later and returns the pacer's next slot as its Deadline: it is polled
// again, and new data is never held back by it.

const (
	cutFloor = 2 // smallest window after a multiplicative cut
)

// Pacer limits the retransmitted packets per unit of time of the engines
// that share it (Config.Pacer): a token bucket of Burst packets refilled
// one per Interval. It is not safe for concurrent use: the engines sharing
// it must be driven by one goroutine at a time, with a happens-before edge
// between them (a device's engines run under its lock), and it needs no
// lock of its own.
type Pacer struct {
	interval int64 // ns per token
	burst    int
	tokens   int
	last     int64 // time of the last refill
	started  bool
	denied   uint64
}

// Pacer defaults: one retransmission per 10 µs (100,000 per second) after
// a burst of 64, which a loopback or a 10 GbE socket path absorbs.
const (
	DefaultPaceInterval = 10_000
	DefaultPaceBurst    = 64
)

// NewPacer returns a pacer that lets burst retransmissions through at once
// and one more every interval ns; 0 takes DefaultPaceInterval and
// DefaultPaceBurst.
func NewPacer(interval int64, burst int) *Pacer {
	if interval <= 0 {
		interval = DefaultPaceInterval
	}
	if burst <= 0 {
		burst = DefaultPaceBurst
	}
	return &Pacer{interval: interval, burst: burst, tokens: burst}
}

func (p *Pacer) refill(now int64) {
	if !p.started || now < p.last {
		p.started, p.last = true, now
		return
	}
	if p.tokens >= p.burst {
		p.last = now
		return
	}
	if n := (now - p.last) / p.interval; n > 0 {
		p.tokens = min(p.burst, p.tokens+int(n))
		p.last += n * p.interval
	}
}

// take spends a token at now; false: none left.
func (p *Pacer) take(now int64) bool {
	p.refill(now)
	if p.tokens > 0 {
		p.tokens--
		return true
	}
	p.denied++
	return false
}

// next is when the next token arrives (after a take that failed).
func (p *Pacer) next() int64 { return p.last + p.interval }

// Denied returns how many retransmissions the pacer has held back.
func (p *Pacer) Denied() uint64 { return p.denied }

// SendWindow returns the requester's current send window in PSNs (the
// congestion window, at most Config.Window).
func (c *Conn) SendWindow() int { return c.req.cwnd }

// growWindow opens the window after n PSNs were acknowledged.
func (r *requester) growWindow(n int) {
	max := r.c.cfg.Window
	for ; n > 0 && r.cwnd < max; n-- {
		if r.cwnd < r.ssthresh {
			r.cwnd++ // slow start: back to where the last cut left it
			continue
		}
		r.credit++
		if r.credit >= r.cwnd {
			r.credit = 0
			r.cwnd++
		}
	}
}

// cutWindow halves the window for a congestion signal (CNP, CE-marked
// response, sequence NAK), once per round trip.
func (r *requester) cutWindow(now int64) {
	rtt := r.srtt
	if rtt == 0 {
		rtt = r.rto
	}
	if r.cutValid && now-r.lastCut < rtt {
		return
	}
	r.cutValid, r.lastCut = true, now
	r.ssthresh = max(r.cwnd/2, cutFloor)
	r.cwnd = min(r.cwnd, r.ssthresh)
	r.credit = 0
	r.c.st.WindowCuts++
}

// collapseWindow is the timeout's reaction: one packet in flight.
func (r *requester) collapseWindow(now int64) {
	r.ssthresh = max(r.cwnd/2, cutFloor)
	r.cwnd, r.credit = 1, 0
	r.cutValid, r.lastCut = true, now
	r.c.st.WindowCuts++
}

// ceMarked notes a CE-marked request at the responder: a CNP goes back to
// the requester, at most one per Config.CNPInterval.
func (s *responder) ceMarked(now int64) {
	iv := s.c.cfg.CNPInterval
	if iv < 0 {
		return
	}
	if s.cnpValid && now-s.lastCNP < iv {
		return
	}
	s.cnpValid, s.lastCNP, s.cnpPending = true, now, true
}
