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
// Across QPs: a Pacer spaces the retransmissions of all the engines that
// share it (one per device), so that QPs timing out together do not put
// their go-back-N windows ahead of the ACKs that would have stopped them:
// retransmissions are what a congestion collapse is made of, while new
// data is already clocked by each window's ACKs. An engine the pacer puts
// off keeps the packet and returns its slot as its Deadline: it is polled
// again then, and new data is never held back by it.

const (
	cutFloor = 2 // smallest window after a multiplicative cut
)

// Pacer limits the retransmitted packets per unit of time of the engines
// that share it (Config.Pacer): Burst of them may go at once, then one per
// Interval (a token bucket, kept as GCRA's theoretical arrival time). An
// engine it refuses is given a slot of its own in the future, and sends
// then: the QPs that time out together leave one by one, in the order
// they asked, and none is polled in vain meanwhile.
//
// A Pacer is not safe for concurrent use: the engines sharing it must be
// driven by one goroutine at a time, with a happens-before edge between
// them (a device's engines run under its lock), so it needs no lock of
// its own.
type Pacer struct {
	interval int64 // ns per retransmission
	tau      int64 // (burst-1) × interval: how far ahead of now tat may run
	tat      int64 // theoretical arrival time of the next retransmission
	reserved uint64
}

// Pacer defaults: a burst of 128 retransmissions (a default window), then
// one per 2 µs (500,000 a second, about what one core moves through a UDP
// socket), so a go-back-N after a loss costs a fraction of a millisecond
// while a thousand QPs timing out at once are spread over 2 ms.
const (
	DefaultPaceInterval = 2_000
	DefaultPaceBurst    = 128
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
	return &Pacer{interval: interval, tau: int64(burst-1) * interval, tat: -1 << 62}
}

// reserve returns when a retransmission asked for at now may go: now, or a
// later slot, which is then the caller's.
func (p *Pacer) reserve(now int64) int64 {
	t := max(p.tat, now)
	p.tat = t + p.interval
	if t-now <= p.tau {
		return now
	}
	p.reserved++
	return t - p.tau
}

// Reserved returns how many retransmissions the pacer has put off to a
// later slot.
func (p *Pacer) Reserved() uint64 { return p.reserved }

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
