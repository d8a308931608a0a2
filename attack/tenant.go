package attack

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/ibex-rdma/ibex/daemon"
	_ "github.com/ibex-rdma/ibex/provider/ibexd" // ibexd/udp0: the daemon's device
	"github.com/ibex-rdma/ibex/verbs"
)

// daemonProc runs ibexd in a process of its own (mode daemon).
type daemonProc struct {
	d      *daemon.Daemon
	cancel context.CancelFunc
	done   chan error
}

func newDaemonProc(config string) (*daemonProc, error) {
	cfg, err := daemon.LoadConfig(config)
	if err != nil {
		return nil, err
	}
	d, err := daemon.New(cfg)
	if err != nil {
		return nil, err
	}
	// The tenants' processes run as other users.
	if err := os.Chmod(d.Socket(), 0o777); err != nil {
		_ = d.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &daemonProc{d: d, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- d.Serve(ctx) }()
	return p, nil
}

func (p *daemonProc) status() Status { return Status{} }

func (p *daemonProc) do(c command) Status {
	if c.Cmd == "status" {
		return p.status()
	}
	return Status{Err: fmt.Sprintf("daemon: unknown command %q", c.Cmd)}
}

func (p *daemonProc) close() {
	p.cancel()
	<-p.done
}

// hog attaches to a daemon device and takes all it is given: QPs, CQs,
// MRs, then registered memory in 1 MiB MRs, each until refused, and holds
// them until it quits (mode hog). With --attach-only it only attaches.
type hog struct {
	ctx  *verbs.Context
	st   Status
	objs []interface{ Destroy() error }
	mrs  []*verbs.MR
}

func newHog(dev string, attachOnly bool) (*hog, error) {
	ctx, err := verbs.Open(dev)
	if err != nil {
		return nil, err
	}
	h := &hog{ctx: ctx}
	pd, err := ctx.AllocPD()
	if err != nil || attachOnly {
		return h, err
	}
	var got []string
	note := func(what string, n int, err error) {
		if err != nil {
			got = append(got, fmt.Sprintf("%d %s (%s)", n, what, limitOf(err)))
		} else {
			got = append(got, fmt.Sprintf("%d %s (no limit met)", n, what))
		}
	}
	// The daemon makes a CQ's twin when a QP first uses it: each CQ with
	// a QP of its own.
	var cq *verbs.CQ
	n := 0
	for ; n < 256; n++ {
		var c *verbs.CQ
		if c, err = ctx.CreateCQ(4); err != nil {
			break
		}
		var q *verbs.QP
		if q, err = pd.CreateQP(verbs.QPInitAttr{SendCQ: c, RecvCQ: c, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}}); err != nil {
			break
		}
		if cq == nil {
			cq = c
		}
		h.objs = append(h.objs, q)
	}
	note("CQs", n, err)
	if cq == nil {
		h.st.LastErr = strings.Join(got, ", ")
		return h, nil
	}
	for n = 0; n < 256; n++ {
		var q *verbs.QP
		if q, err = pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}}); err != nil {
			break
		}
		h.objs = append(h.objs, q)
	}
	note("more QPs", n, err)
	for n = 0; n < 256; n++ {
		var mr *verbs.MR
		if mr, err = pd.AllocMR(4096, verbs.AccessLocalWrite); err != nil {
			break
		}
		h.mrs = append(h.mrs, mr)
	}
	note("MRs", n, err)
	// Memory: free the small MRs first, so the MR count is not what stops it.
	for _, mr := range h.mrs {
		_ = mr.Dereg()
	}
	h.mrs = h.mrs[:0]
	for n = 0; n < 256; n++ {
		var mr *verbs.MR
		if mr, err = pd.AllocMR(1<<20, verbs.AccessLocalWrite); err != nil {
			break
		}
		h.mrs = append(h.mrs, mr)
	}
	note("MiB registered", n, err)
	h.st.LastErr = strings.Join(got, ", ")
	return h, nil
}

// limitOf is the limit an error names: `tenant "red": quota max_qps 24`
// or `limits.max_qps 16`, else the error's first line.
func limitOf(err error) string {
	msg := firstLine(err.Error())
	for _, k := range []string{"tenant ", "limits."} {
		if i := strings.Index(msg, k); i >= 0 {
			m := msg[i:]
			if j := strings.Index(m, " reached"); j >= 0 {
				return m[:j]
			}
			return m
		}
	}
	return msg
}

func (h *hog) status() Status { return h.st }
func (h *hog) do(c command) Status {
	if c.Cmd == "status" {
		return h.st
	}
	return Status{Err: fmt.Sprintf("hog: unknown command %q", c.Cmd)}
}
func (h *hog) close() {}

// probe attaches and creates one of each resource (mode probe): what the
// other tenant's exhaustion must not take from it. Its status lists what
// failed.
type probe struct{ st Status }

func newProbe(dev string) *probe {
	var failed []string
	add := func(what string, err error) {
		if err != nil {
			failed = append(failed, what+": "+firstLine(err.Error()))
		}
	}
	ctx, err := verbs.Open(dev)
	if err != nil {
		add("attach", err)
		return &probe{st: Status{LastErr: strings.Join(failed, "; "), Failed: []string{"attach"}}}
	}
	var kinds []string
	pd, err := ctx.AllocPD()
	if err != nil {
		add("pd", err)
		kinds = append(kinds, "attach")
	} else {
		cq, err := ctx.CreateCQ(4)
		add("cq", err)
		if err != nil {
			kinds = append(kinds, "cq")
		} else {
			_, err = pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
			add("qp", err)
			if err != nil {
				kinds = append(kinds, "qp")
			}
		}
		_, err = pd.AllocMR(4096, verbs.AccessLocalWrite)
		add("mr", err)
		if err != nil {
			kinds = append(kinds, "mr")
		}
		_, err = pd.AllocMR(1<<20, verbs.AccessLocalWrite)
		add("memory", err)
		if err != nil {
			kinds = append(kinds, "memory")
		}
	}
	return &probe{st: Status{LastErr: strings.Join(failed, "; "), Failed: kinds}}
}

func (p *probe) status() Status { return p.st }
func (p *probe) do(c command) Status {
	if c.Cmd == "status" {
		return p.st
	}
	return Status{Err: fmt.Sprintf("probe: unknown command %q", c.Cmd)}
}
func (p *probe) close() {}

// keys attaches and registers MRs (mode keys): the attacker learns the keys
// its own tenant is given.
type keys struct{ st Status }

func newKeys(dev string) (*keys, error) {
	ctx, err := verbs.Open(dev)
	if err != nil {
		return nil, err
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		return nil, err
	}
	k := &keys{}
	for range 16 {
		mr, err := pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			return nil, err
		}
		k.st.Keys = append(k.st.Keys, mr.RKey())
	}
	return k, nil
}

func (k *keys) status() Status { return k.st }
func (k *keys) do(c command) Status {
	if c.Cmd == "status" {
		return k.st
	}
	return Status{Err: fmt.Sprintf("keys: unknown command %q", c.Cmd)}
}
func (k *keys) close() {}

// intruder is a process of the attacker's tenant on the victim's daemon
// (mode intruder): it connects a QP of its own to a victim QP, as a sniffer
// learnt it, and WRITEs with a sniffed rkey and address, all through the
// daemon. Its status tells how far it got.
type intruder struct{ st Status }

func newIntruder(dev string, c command, rkey uint32, va uint64, spi uint32) *intruder {
	in := &intruder{}
	step := func(what string, err error) bool {
		if err != nil {
			in.st.LastErr = what + ": " + firstLine(err.Error())
			in.st.Hole = what
		}
		return err == nil
	}
	ctx, err := verbs.Open(dev)
	if !step("attach", err) {
		return in
	}
	e, err := newEnd(ctx, nil, slotLen)
	if !step("setup", err) {
		return in
	}
	for i := range e.mr.Bytes() {
		e.mr.Bytes()[i] = 0xe7
	}
	gid := e.qp.Info().GID // the daemon's device: the victim's too
	if c.Addr != "" {
		ap, err := netip.ParseAddr(c.Addr)
		if !step("peer", err) {
			return in
		}
		gid = verbs.GID(ap.As16())
	}
	err = e.qp.Connect(verbs.ConnInfo{QPN: c.QPN, PSN: 0, GID: gid, MTU: e.qp.Info().MTU, SPI: spi},
		verbs.ConnectOptions{Set: verbs.AttrSQPSN, Attr: verbs.QPAttr{SQPSN: c.PSN}})
	if !step("connect", err) {
		return in
	}
	st, err := writeWait(e, 0, slotLen, va, rkey)
	if !step("write", err) {
		return in
	}
	in.st.Hole = st.String()
	if st != verbs.WCSuccess {
		in.st.LastErr = "write completed " + st.String()
	}
	return in
}

func (in *intruder) status() Status { return in.st }
func (in *intruder) do(c command) Status {
	if c.Cmd == "status" {
		return in.st
	}
	return Status{Err: fmt.Sprintf("intruder: unknown command %q", c.Cmd)}
}
func (in *intruder) close() {}
