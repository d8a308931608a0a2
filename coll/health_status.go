package coll

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Status is what a status port answers: the communicators this process
// serves (their rank 0 is here) and those it holds ranks of.
type Status struct {
	Time  time.Time    `json:"time"`
	Host  string       `json:"host"`
	PID   int          `json:"pid"`
	Comms []CommStatus `json:"communicators"`
}

// CommStatus is one communicator as its status service sees it.
type CommStatus struct {
	ID      string `json:"id"`
	Size    int    `json:"size"`
	Service string `json:"service"` // rank 0's status service
	// Remote: the service is in another process (Service); Ranks are only
	// this process's ranks, as they see themselves (health
	// "unclassified").
	Remote bool `json:"remote,omitempty"`
	// State is INIT (a rank is still setting up), RUNNING, FAILED (a rank's
	// communicator aborted) or CLOSING.
	State string       `json:"state"`
	Ranks []RankStatus `json:"ranks"`
	// Errors and Warnings name the outliers.
	Errors   []Finding `json:"errors,omitempty"`
	Warnings []Finding `json:"warnings,omitempty"`
}

// Finding is one problem the service sees, with the ranks it names.
type Finding struct {
	// Kind is DEAD, NOT_HEARD_FROM, STALLED, FAILED, MISMATCH (errors);
	// COUNTS (a warning: the live ranks' collective counts differ, as
	// they do for a moment in normal operation).
	Kind  string `json:"kind"`
	Ranks []int  `json:"ranks"`
	Text  string `json:"text"`
}

// The health of a rank in the status.
const (
	HealthOK         = "ok"
	HealthBehind     = "behind"  // fewer collectives, or still in one others finished
	HealthStalled    = "stalled" // behind for Heartbeat × 5
	HealthNotHeard   = "not heard from"
	HealthDead       = "dead"
	HealthFailed     = "failed" // its communicator aborted
	HealthClosed     = "closed"
	healthUnclassify = "unclassified"
)

// RankStatus is one rank as the service sees it.
type RankStatus struct {
	Rank   int    `json:"rank"`
	PID    int    `json:"pid,omitempty"`
	Host   string `json:"host,omitempty"`
	Health string `json:"health"`
	Reason string `json:"reason,omitempty"`
	// State is the communicator's on the rank: init, ready, failed,
	// closing, closed.
	State string `json:"state,omitempty"`
	// HeardAgo is the seconds since its last heartbeat (-1: never).
	HeardAgo float64 `json:"heard_ago_s"`
	// Collectives is how many it has begun; Counts per kind of call.
	Collectives uint64            `json:"collectives"`
	Counts      map[string]uint64 `json:"counts,omitempty"`
	// Call is its current call, or its last.
	Call *Record `json:"call,omitempty"`
	// For is how long it has been where Call says: since the call's
	// start while it runs, since its end after.
	For float64 `json:"for_s"`
	// Doing is that in words: "in all_reduce #3 step 1/6 for 2.1 s".
	Doing string `json:"doing"`
}

// rankView is a copy of a rank's slot, for classify.
type rankView struct {
	rank     int
	slot     rankSlot
	heardAgo time.Duration
	pidGone  bool
}

// since is how long before now the rank's clock time t was: its age at
// the last beat, plus the time since.
func (v *rankView) since(t int64) time.Duration {
	return time.Duration(v.slot.b.sent-t) + v.heardAgo
}

// classify tells each rank's health and names the outliers.
func classify(id string, size int, service string, every time.Duration, views []rankView, verbose bool) CommStatus {
	cs := CommStatus{ID: id, Size: size, Service: service, Ranks: make([]RankStatus, len(views))}
	pos := make([]uint64, len(views))
	posAge := make([]time.Duration, len(views))
	live := make([]bool, len(views))
	for i := range views {
		v := &views[i]
		s := &v.slot
		rs := &cs.Ranks[i]
		*rs = RankStatus{Rank: v.rank, PID: s.pid, Host: s.host, HeardAgo: -1}
		if !s.hello {
			rs.Health, rs.Reason, rs.Doing = HealthNotHeard, "never reported (not started, or its setup failed)", "never reported"
			continue
		}
		rs.HeardAgo = v.heardAgo.Seconds()
		switch {
		case s.bye:
			rs.Health = HealthClosed
		case s.lost != "":
			rs.Health, rs.Reason = HealthDead, s.lost
			if v.pidGone {
				rs.Reason += fmt.Sprintf(", and pid %d is gone", s.pid)
			}
		case v.pidGone:
			rs.Health, rs.Reason = HealthDead, fmt.Sprintf("pid %d is gone", s.pid)
		case v.heardAgo > deadBeats*every:
			rs.Health, rs.Reason = HealthDead, fmt.Sprintf("silent for %.1f s", v.heardAgo.Seconds())
		case s.b.commState == commBroken:
			rs.Health, rs.Reason = HealthFailed, s.err
		case v.heardAgo > silentBeats*every:
			rs.Health, rs.Reason = HealthNotHeard, fmt.Sprintf("silent for %.1f s", v.heardAgo.Seconds())
		default:
			rs.Health = HealthOK
		}
		// A dead rank's times stop at its last heartbeat.
		if rs.Health == HealthDead {
			v.heardAgo = 0
		}
		rs.State = commStateNames[s.b.commState]
		if s.bye {
			rs.State = "closed"
		}
		rs.Collectives = s.b.calls
		rs.Counts = map[string]uint64{}
		for op := recOp(1); op < numRecOps; op++ {
			if n := s.b.counts[op]; n > 0 {
				rs.Counts[op.String()] = n
			}
		}
		w := s.b.rec
		pos[i] = 2 * s.b.calls
		switch {
		case s.beats == 0:
			rs.For = v.heardAgo.Seconds()
		case w.state == 0:
			posAge[i] = v.since(s.born)
			rs.For = posAge[i].Seconds()
		case w.state == recDone:
			posAge[i] = v.since(w.end)
			rs.For = posAge[i].Seconds()
		default:
			posAge[i] = v.since(w.start)
			rs.For = posAge[i].Seconds()
			if w.state == recFailed {
				rs.For = v.since(w.end).Seconds()
			}
			if w.op().collective() && w.seq == s.b.calls {
				pos[i]--
			}
		}
		if w.state != 0 {
			rec := w.export()
			rec.Error = s.err
			rs.Call = &rec
		}
		rs.Doing = doing(*rs)
		live[i] = rs.Health != HealthDead && rs.Health != HealthClosed && s.beats > 0
	}
	// Behind: a rank whose position (2 × collectives begun, less one while
	// in the latest) is below a live rank's; stalled once it has been so
	// for stallBeats heartbeats: as long as it has been where it is, and
	// as long as the ranks past it have been past it.
	for i := range views {
		rs := &cs.Ranks[i]
		if rs.Health != HealthOK || !live[i] {
			continue
		}
		ahead := time.Duration(-1)
		for q := range views {
			if live[q] && pos[q] > pos[i] {
				ahead = max(ahead, posAge[q])
			}
		}
		if ahead < 0 {
			continue
		}
		rs.Health = HealthBehind
		if min(ahead, posAge[i]) >= stallBeats*every {
			rs.Health = HealthStalled
		}
	}
	cs.findings(pos, live, verbose)
	// The communicator's state, from the ranks that still report.
	cs.State = "RUNNING"
	for i, rs := range cs.Ranks {
		switch {
		case rs.Health == HealthFailed:
			cs.State = "FAILED"
		case !live[i]:
		case rs.State == "init" && cs.State != "FAILED":
			cs.State = "INIT"
		case rs.State == "closing" && cs.State == "RUNNING":
			cs.State = "CLOSING"
		}
	}
	return cs
}

// findings names the outliers: every dead, silent, stalled and failed
// rank, and ranks whose calls differ; the ranks with other collective
// counts as NCCL's RAS names outliers (a group of at most 25% of the
// ranks and 10 members; verbose: under 50%, any size).
func (cs *CommStatus) findings(pos []uint64, live []bool, verbose bool) {
	who := func(i int) string {
		rs := &cs.Ranks[i]
		if rs.PID == 0 {
			return fmt.Sprintf("rank %d", rs.Rank)
		}
		return fmt.Sprintf("rank %d (pid %d on %s)", rs.Rank, rs.PID, rs.Host)
	}
	named := func(n int) bool {
		if verbose {
			return 2*n < len(cs.Ranks)
		}
		return 4*n <= len(cs.Ranks) && n <= 10
	}
	add := func(warn bool, kind string, ranks []int, text string) {
		f := Finding{Kind: kind, Ranks: ranks, Text: text}
		if warn {
			cs.Warnings = append(cs.Warnings, f)
		} else {
			cs.Errors = append(cs.Errors, f)
		}
	}
	for i, rs := range cs.Ranks {
		switch rs.Health {
		case HealthDead:
			add(false, "DEAD", []int{rs.Rank}, fmt.Sprintf("%s is dead: %s; its last heartbeat, %.1f s ago, said: %s", who(i), rs.Reason, rs.HeardAgo, rs.Doing))
		case HealthNotHeard:
			if rs.HeardAgo < 0 {
				add(false, "NOT_HEARD_FROM", []int{rs.Rank}, fmt.Sprintf("rank %d never reported (not started, or its setup failed)", rs.Rank))
			} else {
				add(false, "NOT_HEARD_FROM", []int{rs.Rank}, fmt.Sprintf("%s not heard from for %.1f s; it was %s", who(i), rs.HeardAgo, rs.Doing))
			}
		case HealthFailed:
			add(false, "FAILED", []int{rs.Rank}, fmt.Sprintf("%s %s: %s", who(i), rs.Doing, clip(rs.Reason, 300)))
		case HealthStalled:
			// The ranks past it, grouped by what they do.
			groups := map[string][]int{}
			var keys []string
			for q := range cs.Ranks {
				if live[q] && pos[q] > pos[i] {
					k := shortDoing(cs.Ranks[q])
					if groups[k] == nil {
						keys = append(keys, k)
					}
					groups[k] = append(groups[k], cs.Ranks[q].Rank)
				}
			}
			var past []string
			for _, k := range keys {
				past = append(past, fmt.Sprintf("%s %s", rankList(groups[k]), k))
			}
			add(false, "STALLED", []int{rs.Rank}, fmt.Sprintf("%s is stalled: %s; past it: %s", who(i), rs.Doing, strings.Join(past, "; ")))
		}
	}
	// Mismatch: ranks at the same collective whose calls differ, or whose
	// counts by kind differ.
	byCall := map[uint64]map[string][]int{}
	byCounts := map[uint64]map[string][]int{}
	for i, rs := range cs.Ranks {
		if !live[i] && rs.Health != HealthFailed {
			continue
		}
		if rs.Call != nil && rs.Call.Seq == rs.Collectives && parseRecOp(rs.Call.Op).collective() {
			c := rs.Call
			k := fmt.Sprintf("%s of %d B %s", c.Op, c.Bytes, c.DType)
			if c.Redop != "" {
				k += " " + c.Redop
			}
			if c.Op == "broadcast" || c.Op == "reduce" {
				k += fmt.Sprintf(" (root %d)", c.Root)
			}
			if byCall[rs.Collectives] == nil {
				byCall[rs.Collectives] = map[string][]int{}
			}
			byCall[rs.Collectives][k] = append(byCall[rs.Collectives][k], i)
		}
		var counts []string
		for op := recOp(1); op < recSend; op++ {
			if n := rs.Counts[op.String()]; n > 0 {
				counts = append(counts, fmt.Sprintf("%s %d", op, n))
			}
		}
		if byCounts[rs.Collectives] == nil {
			byCounts[rs.Collectives] = map[string][]int{}
		}
		k := strings.Join(counts, ", ")
		byCounts[rs.Collectives][k] = append(byCounts[rs.Collectives][k], i)
	}
	mismatch := func(m map[string][]int, what string) {
		if len(m) < 2 {
			return
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		// The largest group first: the others are the outliers, named.
		sort.Slice(keys, func(a, b int) bool {
			if len(m[keys[a]]) != len(m[keys[b]]) {
				return len(m[keys[a]]) > len(m[keys[b]])
			}
			return keys[a] < keys[b]
		})
		var parts []string
		var ranks []int
		for gi, k := range keys {
			g := m[k]
			if gi == 0 {
				parts = append(parts, fmt.Sprintf("%s: %s", ranksOf(cs, g), k))
				continue
			}
			var ws []string
			for _, i := range g {
				ws = append(ws, who(i))
				ranks = append(ranks, cs.Ranks[i].Rank)
			}
			parts = append(parts, fmt.Sprintf("%s: %s", strings.Join(ws, ", "), k))
		}
		add(false, "MISMATCH", ranks, what+": "+strings.Join(parts, "; "))
	}
	for _, n := range sortedKeys(byCall) {
		mismatch(byCall[n], fmt.Sprintf("ranks differ in collective #%d", n))
	}
	for _, n := range sortedKeys(byCounts) {
		mismatch(byCounts[n], fmt.Sprintf("ranks at collective #%d made different collectives before", n))
	}
	// Counts that differ between live ranks: a warning (ranks run ahead by
	// a call in normal operation), naming the outlier groups.
	groups := map[uint64][]int{}
	for i, rs := range cs.Ranks {
		if live[i] {
			groups[rs.Collectives] = append(groups[rs.Collectives], i)
		}
	}
	if len(groups) > 1 {
		var parts []string
		var ranks []int
		for _, n := range sortedKeys(groups) {
			g := groups[n]
			s := fmt.Sprintf("%d ranks have begun collective #%d", len(g), n)
			if len(g) == 1 {
				s = fmt.Sprintf("1 rank has begun collective #%d", n)
			}
			if named(len(g)) {
				var ws []string
				for _, i := range g {
					ws = append(ws, who(i))
					ranks = append(ranks, cs.Ranks[i].Rank)
				}
				s += ": " + strings.Join(ws, ", ")
			}
			parts = append(parts, s)
		}
		add(true, "COUNTS", ranks, "collective counts differ: "+strings.Join(parts, "; "))
	}
}

// clip shortens s to about n bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	var ks []uint64
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(a, b int) bool { return ks[a] > ks[b] })
	return ks
}

// ranksOf lists the ranks of indices g.
func ranksOf(cs *CommStatus, g []int) string {
	rs := make([]int, len(g))
	for j, i := range g {
		rs[j] = cs.Ranks[i].Rank
	}
	return rankList(rs)
}

// rankList is "rank 3" or "ranks 0,1,3".
func rankList(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	if len(rs) == 1 {
		return "rank " + s[0]
	}
	return "ranks " + strings.Join(s, ",")
}

// callName is "all_reduce #3" (send #2 for point-to-point: the rank's own
// count).
func callName(r *Record) string { return fmt.Sprintf("%s #%d", r.Op, r.Seq) }

// doing says where a rank is, with how long.
func doing(rs RankStatus) string {
	r := rs.Call
	switch {
	case rs.State == "closed":
		return "closed"
	case r == nil && rs.State == "init":
		return fmt.Sprintf("setting up for %.1f s", rs.For)
	case r == nil:
		return fmt.Sprintf("no call yet, for %.1f s", rs.For)
	case r.State == "running":
		return fmt.Sprintf("in %s step %d/%d for %.1f s", callName(r), r.Step, r.Steps, rs.For)
	case r.State == "failed":
		return fmt.Sprintf("failed in %s at step %d/%d, %.1f s ago", callName(r), r.Step, r.Steps, rs.For)
	}
	return fmt.Sprintf("idle after %s for %.1f s", callName(r), rs.For)
}

// shortDoing is doing without the times.
func shortDoing(rs RankStatus) string {
	r := rs.Call
	switch {
	case r == nil:
		return "with no call yet"
	case r.State == "running":
		return fmt.Sprintf("in %s step %d/%d", callName(r), r.Step, r.Steps)
	case r.State == "failed":
		return "failed in " + callName(r)
	}
	return "idle after " + callName(r)
}

// explain is what a failing call's error says of the status: the ranks it
// waited on first, then any other rank that is not well (but self).
func (cs *CommStatus) explain(waited []int, self int) string {
	one := func(rs RankStatus) string {
		detail := rs.Doing
		switch {
		case rs.Health == HealthDead:
			detail = fmt.Sprintf("%s; its last heartbeat, %.1f s ago, said: %s", rs.Reason, rs.HeardAgo, rs.Doing)
		case rs.Reason != "" && rs.Health != HealthFailed:
			detail = rs.Reason + "; it was " + rs.Doing
		}
		if rs.HeardAgo >= 0 && rs.Health != HealthDead && rs.Health != HealthClosed {
			detail += fmt.Sprintf(", heard %.1f s ago", rs.HeardAgo)
		}
		return fmt.Sprintf("rank %d %s (%s)", rs.Rank, rs.Health, detail)
	}
	var parts, also []string
	in := map[int]bool{}
	for _, q := range waited {
		in[q] = true
		if q >= 0 && q < len(cs.Ranks) {
			parts = append(parts, one(cs.Ranks[q]))
		}
	}
	for _, rs := range cs.Ranks {
		if !in[rs.Rank] && rs.Rank != self && rs.Health != HealthOK && rs.Health != HealthClosed && rs.Health != HealthFailed {
			also = append(also, one(rs))
		}
	}
	s := ""
	if len(parts) > 0 {
		s = "waited on " + strings.Join(parts, ", ")
	}
	if len(also) > 0 {
		if s != "" {
			s += "; also "
		}
		s += strings.Join(also, ", ")
	}
	if s == "" {
		s = "every other rank is well"
	}
	return s
}

// errorKinds is the Errors column: the kinds of errors, or OK.
func (cs *CommStatus) errorKinds() string {
	var ks []string
	seen := map[string]bool{}
	for _, f := range cs.Errors {
		if !seen[f.Kind] {
			seen[f.Kind] = true
			ks = append(ks, f.Kind)
		}
	}
	if len(ks) == 0 {
		if cs.Remote {
			return "-"
		}
		return "OK"
	}
	return strings.Join(ks, ",")
}

// WriteText writes the status as the text port answers it: a table of
// the communicators, then the errors and warnings naming the outliers,
// and (verbose) every rank.
func (st Status) WriteText(w io.Writer, verbose bool) {
	fmt.Fprintf(w, "ibex coll status: host %s, pid %d, %s\n\n", st.Host, st.PID, st.Time.Format("2006-01-02 15:04:05"))
	fmt.Fprintf(w, "Communicators\n=============\n\n")
	if len(st.Comms) == 0 {
		fmt.Fprintf(w, "  (none in this process)\n")
		return
	}
	fmt.Fprintf(w, "%-18s %6s %12s %9s  %s\n", "Id", "Ranks", "Collectives", "Status", "Errors")
	for _, cs := range st.Comms {
		lo, hi := uint64(0), uint64(0)
		for i, rs := range cs.Ranks {
			if i == 0 || rs.Collectives < lo {
				lo = rs.Collectives
			}
			hi = max(hi, rs.Collectives)
		}
		calls := strconv.FormatUint(lo, 10)
		if hi != lo {
			calls += "-" + strconv.FormatUint(hi, 10)
		}
		fmt.Fprintf(w, "%-18s %6d %12s %9s  %s\n", "#"+cs.ID, cs.Size, calls, cs.State, cs.errorKinds())
	}
	for _, cs := range st.Comms {
		if cs.Remote {
			fmt.Fprintf(w, "  #%s: %s here; its status is at rank 0's service, %s\n", cs.ID, ranksOf(&cs, indices(len(cs.Ranks))), cs.Service)
		}
	}
	section := func(title string, get func(CommStatus) []Finding) {
		any := false
		for _, cs := range st.Comms {
			for _, f := range get(cs) {
				if !any {
					fmt.Fprintf(w, "\n%s\n%s\n\n", title, strings.Repeat("=", len(title)))
					any = true
				}
				fmt.Fprintf(w, "#%s %s\n  %s\n", cs.ID, f.Kind, f.Text)
			}
		}
	}
	section("Errors", func(cs CommStatus) []Finding { return cs.Errors })
	section("Warnings", func(cs CommStatus) []Finding { return cs.Warnings })
	if !verbose {
		return
	}
	fmt.Fprintf(w, "\nRanks\n=====\n")
	for _, cs := range st.Comms {
		fmt.Fprintf(w, "\n#%s (%d ranks, service %s)\n", cs.ID, cs.Size, cs.Service)
		fmt.Fprintf(w, "  %4s %8s %-16s %-14s %7s  %s\n", "rank", "pid", "host", "health", "heard", "doing")
		for _, rs := range cs.Ranks {
			heard := "never"
			if rs.HeardAgo >= 0 {
				heard = fmt.Sprintf("%.1fs", rs.HeardAgo)
			}
			d := rs.Doing
			if rs.Call != nil {
				c := rs.Call
				d += fmt.Sprintf(" [%d B %s", c.Bytes, c.DType)
				if c.Redop != "" {
					d += " " + c.Redop
				}
				if c.Algorithm != "" {
					d += ", " + c.Algorithm
				}
				d += ", " + c.Path + "]"
			}
			if rs.Reason != "" && rs.Health != HealthFailed {
				d += "; " + rs.Reason
			}
			fmt.Fprintf(w, "  %4d %8d %-16s %-14s %7s  %s\n", rs.Rank, rs.PID, rs.Host, rs.Health, heard, d)
		}
	}
}

func indices(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// ReadStatus asks the status port (or a communicator's service) at addr
// for the status, as JSON, and decodes it.
func ReadStatus(ctx context.Context, addr string) (Status, error) {
	var st Status
	b, err := QueryStatus(ctx, addr, "SET FORMAT json\nVERBOSE STATUS\n")
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("coll: status from %s: %w (%.200q)", addr, err, b)
	}
	return st, nil
}

// QueryStatus sends the text protocol's lines (STATUS, VERBOSE STATUS, SET
// FORMAT json|text) to addr and returns the answer.
func QueryStatus(ctx context.Context, addr, lines string) ([]byte, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("coll: status at %s: %w", addr, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	if _, err := io.WriteString(conn, lines); err != nil {
		return nil, fmt.Errorf("coll: status at %s: %w", addr, err)
	}
	b, err := io.ReadAll(io.LimitReader(bufio.NewReader(conn), 64<<20))
	if err != nil {
		return b, fmt.Errorf("coll: status at %s: %w", addr, errOr(ctx, err))
	}
	if strings.HasPrefix(string(b), "error: ") {
		return b, fmt.Errorf("coll: status at %s: %s", addr, strings.TrimSpace(string(b)))
	}
	return b, nil
}
