package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/internal/hwq"
	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/internal/shmem"
	"github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/verbs"
)

// The upgrade (Snap's transparent upgrade): a new daemon binary, started
// with Takeover, connects to the running daemon's socket and asks for a
// handover. The running daemon
//
//  1. stops taking new work requests from the rings (completions still
//     move) and waits until every request it posted has completed;
//  2. stops reading the processes' sockets between two requests, and
//     stops its engines;
//  3. freezes its devices (udp.Freeze: the progress loops stop, the
//     sockets close, each QP's protocol state is exported);
//  4. moves the last completions into the rings, and sends the new daemon
//     its listener, every process's socket, doorbell, rings and memory
//     (as descriptors) and every object with its ids, keys, QP numbers,
//     attributes, protocol state and posted receives;
//  5. exits once the new daemon says it serves.
//
// The new daemon binds the devices, rebuilds every object with the same
// numbers and keys (verbs.PD.RestoreMR, QPInitAttr.QPN, udp.RestoreQP),
// posts the receives again, and starts serving. The processes see a
// pause: no request fails and no completion is lost or repeated; packets
// that were on the wire during the switch are resent by go-back-N.

// OpHandover is the first message of a new daemon taking over.
const OpHandover = "handover"

// quiesceTimeout bounds how long the running daemon waits for the
// requests it posted to complete before it refuses the handover.
const quiesceTimeout = 2 * time.Second

// handoverState is everything the new daemon needs, but the descriptors,
// which follow it (FD fields are indices into them).
type handoverState struct {
	Listener int
	Engines  []int // each engine's doorbell page
	Devices  []DeviceConfig
	Clients  []handoverClient
	Started  time.Time
	Detached uint64
}

type handoverClient struct {
	PID             int
	Command, Device string
	Conn, Engine    int
	NextID          uint32
	MemBytes        uint64
	Posted, Comps   uint64
	PDs             []uint32
	Segs            []handoverSeg
	MRs             []handoverMR
	CQs             []handoverCQ
	QPs             []handoverQP
}

type handoverSeg struct {
	ID uint32
	FD int
}

type handoverMR struct {
	ID, PD, Seg uint32
	Off, Len    uint64
	IOVA        uint64
	Access      verbs.Access
	LKey, RKey  uint32
}

type handoverCQ struct {
	ID           uint32
	Depth        int // the process's
	DaemonDepth  int
	FD, RingSize int
	Backlog      []hwq.CQE
}

type handoverQP struct {
	QPN, PD        uint32
	SendCQ, RecvCQ uint32
	Cap            verbs.QPCap
	Attr           verbs.QPAttr
	FD, RQOff      int
	RC             *rc.State
	Recvs          []verbs.RecvWR
	PSP            *udp.PSPState `json:",omitempty"` // an encrypted QP's SAs
}

// handOver runs in the goroutine of the new daemon's connection.
func (d *Daemon) handOver(conn *net.UnixConn) error {
	if uid, ok := peerUID(conn); !ok || (uid != 0 && uid != os.Getuid()) {
		return fmt.Errorf("handover: refused to uid %d (only root or uid %d may take this daemon over)", uid, os.Getuid())
	}
	if !d.handing.CompareAndSwap(false, true) {
		return errors.New("handover: another handover is in progress")
	}
	// Stop accepting (Serve waits for the outcome); processes that
	// connect meanwhile wait in the listener's backlog for the next
	// daemon.
	_ = d.ln.SetDeadline(time.Now())
	d.mu.Lock()
	cs := make([]*client, 0, len(d.clients))
	for c := range d.clients {
		cs = append(cs, c)
	}
	d.mu.Unlock()
	sort.Slice(cs, func(i, j int) bool { return cs[i].pid < cs[j].pid })
	// 1. No new work; what was posted completes.
	for _, c := range cs {
		// Under engMu: a pass in progress ends first, and what it
		// posted is in inflight before anyone reads it.
		c.engMu.Lock()
		c.quiesce.Store(true)
		c.engMu.Unlock()
	}
	deadline := time.Now().Add(quiesceTimeout)
	for _, c := range cs {
		for c.inflight.Load() > 0 {
			if time.Now().After(deadline) {
				for _, c := range cs {
					c.quiesce.Store(false)
				}
				return fmt.Errorf("handover: pid %d still has %d requests in flight after %v", c.pid, c.inflight.Load(), quiesceTimeout)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	// 2. Stop the readers between requests, and the engines. The
	// connection is duplicated first: the reader's end closes it.
	conns := map[*client]*os.File{}
	defer func() {
		for _, f := range conns {
			f.Close()
		}
	}()
	for _, c := range cs {
		cf, err := c.conn.File()
		if err != nil {
			return fmt.Errorf("handover: pid %d: %w", c.pid, err)
		}
		conns[c] = cf
		c.handing.Store(true)
		_ = c.conn.SetReadDeadline(time.Now())
		<-c.serveDone
		c.cancel()
		c.eng.remove(c)
		c.mu.Lock()
		for _, e := range c.cqs {
			e.stop()
		}
		c.mu.Unlock()
	}
	// 3. Freeze the devices.
	rcs := map[string]map[uint32]rc.State{}
	psps := map[string]map[uint32]udp.PSPState{}
	for _, dc := range d.cfg.Devices {
		st, err := udp.Freeze(dc.Name)
		if err != nil {
			// Past this point there is no way back: the new daemon
			// takes what could be exported; a QP without state fails.
			fmt.Fprintf(os.Stderr, "ibexd: handover: %v\n", err)
		}
		rcs[dc.Name] = st
		psps[dc.Name] = udp.FrozenPSP(dc.Name)
	}
	// 4. The last completions, then the state and the descriptors.
	var fds []int
	fd := func(f int) int {
		fds = append(fds, f)
		return len(fds) - 1
	}
	lf, err := d.ln.File()
	if err != nil {
		return fmt.Errorf("handover: listener: %w", err)
	}
	defer lf.Close()
	hs := handoverState{Listener: fd(int(lf.Fd())), Devices: d.cfg.Devices, Started: d.started, Detached: d.detached.Load()}
	engineIndex := map[*engine]int{}
	for i, e := range d.engines {
		hs.Engines = append(hs.Engines, fd(e.db.FD))
		engineIndex[e] = i
	}
	for _, c := range cs {
		// Completions go to the rings as far as the process drains
		// them; the rest travel with the state.
		for range 20 {
			if n, _ := c.pass(); n == 0 {
				break
			}
		}
		set := c.set.Load()
		for _, e := range set.cqs {
			e.takeAll(set.byQPN)
		}
		hc := handoverClient{PID: c.pid, Command: c.command, Device: c.device, Conn: fd(int(conns[c].Fd())), Engine: engineIndex[c.eng],
			NextID: c.nextID, MemBytes: c.memBytes, Posted: c.posted.Load(), Comps: c.completed.Load()}
		for id := range c.pds {
			hc.PDs = append(hc.PDs, id)
		}
		for id, s := range c.segs {
			hc.Segs = append(hc.Segs, handoverSeg{ID: id, FD: fd(s.seg.FD)})
		}
		for id, m := range c.mrs {
			s := c.segs[m.seg]
			off := m.mr.Addr() // the IOVA; the offset is where its bytes sit in the segment
			hc.MRs = append(hc.MRs, handoverMR{ID: id, PD: pdOf(c, m.mr.PD()), Seg: m.seg, Off: segOffset(s.seg.Mem, m.mr.Bytes()),
				Len: uint64(m.mr.Len()), IOVA: off, Access: m.mr.Access(), LKey: m.mr.LKey(), RKey: m.mr.RKey()})
		}
		for id, e := range c.cqs {
			hc.CQs = append(hc.CQs, handoverCQ{ID: id, Depth: e.depth, DaemonDepth: e.cq.Depth(), FD: fd(e.seg.FD), RingSize: len(e.seg.Mem), Backlog: e.backlog})
		}
		for n, q := range c.qps {
			hq := handoverQP{QPN: n, PD: q.pd, SendCQ: q.sendCQ.id, RecvCQ: q.recvCQ.id, Cap: q.qp.Cap(), Attr: q.qp.Query(),
				FD: fd(q.seg.FD), RQOff: q.rqOff, Recvs: q.posted.list()}
			if st, ok := rcs[c.device][n]; ok {
				hq.RC = &st
			}
			if st, ok := psps[c.device][n]; ok {
				hq.PSP = &st
			}
			hc.QPs = append(hc.QPs, hq)
		}
		hs.Clients = append(hs.Clients, hc)
	}
	if err := sendHandover(conn, &hs, fds); err != nil {
		return fmt.Errorf("handover: send: %w", err)
	}
	// 5. Wait until the new daemon serves.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var r ibexdwire.Response
	got, err := ibexdwire.Recv(conn, make([]byte, ibexdwire.MaxMessage), &r)
	ibexdwire.CloseFDs(got)
	if err != nil {
		return fmt.Errorf("handover: no word from the new daemon: %w", err)
	}
	if err := r.Error(); err != nil {
		return fmt.Errorf("handover: the new daemon failed: %w", err)
	}
	return nil
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// pdOf is the process's id of pd.
func pdOf(c *client, pd *verbs.PD) uint32 {
	for id, p := range c.pds {
		if p == pd {
			return id
		}
	}
	return 0
}

// segOffset is where b starts inside mem.
func segOffset(mem, b []byte) uint64 {
	if len(b) == 0 || len(mem) == 0 {
		return 0
	}
	return uint64(uintptrOf(b) - uintptrOf(mem))
}

func peerUID(conn *net.UnixConn) (int, bool) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0, false
	}
	uid, ok := 0, false
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			uid, ok = int(cred.Uid), true
		}
	})
	return uid, ok
}

// The handover stream: a header (ibexdwire.Response with Handover sizes
// in Err-free fields is not needed: a small JSON header), the state in
// chunks, then the descriptors in batches.
const (
	handoverChunk = 32 << 10
	handoverFDs   = 64
)

type handoverHeader struct {
	Bytes, FDs int
	Err        string // the running daemon refused
}

func sendHandover(conn *net.UnixConn, hs *handoverState, fds []int) error {
	b, err := json.Marshal(hs)
	if err != nil {
		return err
	}
	h, _ := json.Marshal(handoverHeader{Bytes: len(b), FDs: len(fds)})
	if err := shmem.SendFDs(conn, h); err != nil {
		return err
	}
	for off := 0; off < len(b); off += handoverChunk {
		if err := shmem.SendFDs(conn, b[off:min(off+handoverChunk, len(b))]); err != nil {
			return err
		}
	}
	for off := 0; off < len(fds); off += handoverFDs {
		if err := shmem.SendFDs(conn, []byte{'f'}, fds[off:min(off+handoverFDs, len(fds))]...); err != nil {
			return err
		}
	}
	return nil
}

func recvHandover(conn *net.UnixConn) (*handoverState, []int, error) {
	buf := make([]byte, handoverChunk)
	n, fds, err := shmem.RecvFDs(conn, buf, 0)
	if err != nil {
		return nil, nil, err
	}
	ibexdwire.CloseFDs(fds)
	var h handoverHeader
	if err := json.Unmarshal(buf[:n], &h); err != nil {
		return nil, nil, fmt.Errorf("handover header: %w", err)
	}
	if h.Err != "" {
		return nil, nil, fmt.Errorf("the running daemon refused: %s", h.Err)
	}
	if h.Bytes <= 0 || h.Bytes > 1<<30 || h.FDs < 0 || h.FDs > 1<<20 {
		return nil, nil, fmt.Errorf("handover header: %d bytes, %d descriptors", h.Bytes, h.FDs)
	}
	b := make([]byte, 0, h.Bytes)
	for len(b) < h.Bytes {
		n, got, err := shmem.RecvFDs(conn, buf, 0)
		ibexdwire.CloseFDs(got)
		if err != nil {
			return nil, nil, err
		}
		b = append(b, buf[:n]...)
	}
	var all []int
	for len(all) < h.FDs {
		_, got, err := shmem.RecvFDs(conn, buf, handoverFDs)
		if err != nil {
			ibexdwire.CloseFDs(all)
			return nil, nil, err
		}
		all = append(all, got...)
	}
	var hs handoverState
	if err := json.Unmarshal(b, &hs); err != nil {
		ibexdwire.CloseFDs(all)
		return nil, nil, fmt.Errorf("handover state: %w", err)
	}
	return &hs, all, nil
}

// Takeover starts a daemon that takes over the one serving cfg.Socket:
// its devices, its processes and their QPs, with no connection dropped.
// The old daemon exits once this one serves; Serve continues from there.
func Takeover(cfg Config) (*Daemon, time.Duration, error) {
	if err := cfg.Validate(); err != nil {
		return nil, 0, err
	}
	if len(cfg.Cores) > 0 {
		if err := pinProcess(cfg.Cores); err != nil {
			return nil, 0, fmt.Errorf("ibexd: cores %v: %w", cfg.Cores, err)
		}
	}
	c, err := net.DialTimeout("unixpacket", cfg.Socket, 5*time.Second)
	if err != nil {
		return nil, 0, fmt.Errorf("ibexd: takeover: no daemon on %s: %w", cfg.Socket, err)
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	start := time.Now()
	if err := ibexdwire.Send(conn, &ibexdwire.Request{ID: 1, Op: OpHandover, Version: ibexdwire.Version}); err != nil {
		return nil, 0, fmt.Errorf("ibexd: takeover: %w", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	hs, fds, err := recvHandover(conn)
	if err != nil {
		return nil, 0, fmt.Errorf("ibexd: takeover: %w", err)
	}
	d, err := restore(cfg, hs, fds)
	if err != nil {
		_ = ibexdwire.Send(conn, &ibexdwire.Response{ID: 1, Err: err.Error()})
		return nil, 0, fmt.Errorf("ibexd: takeover: %w", err)
	}
	if err := ibexdwire.Send(conn, &ibexdwire.Response{ID: 1}); err != nil {
		return nil, 0, fmt.Errorf("ibexd: takeover: %w", err)
	}
	return d, time.Since(start), nil
}

// restore rebuilds the old daemon's state. Descriptors it does not keep
// are closed.
func restore(cfg Config, hs *handoverState, fds []int) (_ *Daemon, err error) {
	used := make([]bool, len(fds))
	take := func(i int) (int, error) {
		if i < 0 || i >= len(fds) || used[i] {
			return -1, fmt.Errorf("descriptor %d of %d missing or taken twice", i, len(fds))
		}
		used[i] = true
		return fds[i], nil
	}
	defer func() {
		for i, u := range used {
			if !u {
				unix.Close(fds[i])
			}
		}
	}()
	cfg.Devices = hs.Devices // the devices the processes use, whatever this config says
	d := &Daemon{cfg: cfg, started: hs.Started, devs: map[string]*verbs.Context{}, tenants: tenantsOf(&cfg),
		clients: map[*client]struct{}{}, handedOver: make(chan bool, 1)}
	d.detached.Store(hs.Detached)
	lfd, err := take(hs.Listener)
	if err != nil {
		return nil, err
	}
	fl, err := net.FileListener(os.NewFile(uintptr(lfd), "ibexd-listener"))
	if err != nil {
		return nil, fmt.Errorf("listener: %w", err)
	}
	ul, ok := fl.(*net.UnixListener)
	if !ok {
		fl.Close()
		return nil, errors.New("listener: not a unix socket")
	}
	ul.SetUnlinkOnClose(false) // Serve's shutdown removes the path itself
	d.ln = ul
	// The engines keep their doorbell pages: the processes ring them.
	for i, f := range hs.Engines {
		dbfd, err := take(f)
		if err != nil {
			d.stopEngines()
			return nil, err
		}
		db, err := shmem.Map(dbfd)
		if err != nil {
			d.stopEngines()
			return nil, fmt.Errorf("engine %d doorbell: %w", i, err)
		}
		d.engines = append(d.engines, newEngine(d, i, d.coreOf(i), db))
	}
	if len(d.engines) == 0 {
		return nil, errors.New("the running daemon handed over no engine")
	}
	for i, dc := range d.cfg.Devices {
		if err := udp.SetDevice(dc.Name, dc.AddrPort(), dc.XDP); err != nil {
			return nil, fmt.Errorf("devices[%d]: %w", i, err)
		}
		if err := udp.SetPSP(dc.Name, dc.PSP, dc.PSPKey); err != nil {
			return nil, fmt.Errorf("devices[%d]: %w", i, err)
		}
		if err := setPKeys(&d.cfg, dc); err != nil {
			return nil, fmt.Errorf("devices[%d]: %w", i, err)
		}
		vc, err := verbs.Open("udp/" + dc.Name)
		if err != nil {
			return nil, fmt.Errorf("devices[%d] %s: %w", i, dc.Name, err)
		}
		d.devs[dc.Name] = vc
		if pa, err := vc.QueryPort(1); err == nil {
			d.gids = append(d.gids, pa.GID)
		}
	}
	for i := range hs.Clients {
		c, err := d.restoreClient(&hs.Clients[i], take)
		if err != nil {
			// One process's state that does not rebuild costs that
			// process its attachment, not everyone's.
			fmt.Fprintf(os.Stderr, "ibexd: takeover: pid %d: %v\n", hs.Clients[i].PID, err)
			continue
		}
		d.clients[c] = struct{}{}
		c.tenant.mu.Lock()
		c.tenant.clients++
		c.tenant.mu.Unlock()
	}
	return d, nil
}

func (d *Daemon) restoreClient(hc *handoverClient, take func(int) (int, error)) (*client, error) {
	cfd, err := take(hc.Conn)
	if err != nil {
		return nil, err
	}
	fc, err := net.FileConn(os.NewFile(uintptr(cfd), "ibexd-client"))
	if err != nil {
		return nil, err
	}
	conn, ok := fc.(*net.UnixConn)
	if !ok {
		fc.Close()
		return nil, errors.New("connection: not a unix socket")
	}
	if hc.Engine < 0 || hc.Engine >= len(d.engines) {
		conn.Close()
		return nil, fmt.Errorf("engine %d of %d", hc.Engine, len(d.engines))
	}
	// The kernel says who the process is, as at its attach; this
	// daemon's tenant policy applies to it.
	who, err := peerIdentity(conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	t, err := d.tenantOf(who)
	if err != nil {
		conn.Close()
		return nil, err
	}
	vctx, err := verbs.Open("udp/" + hc.Device)
	if err != nil {
		conn.Close()
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.Background())
	c := &client{d: d, conn: conn, pid: hc.PID, who: who, tenant: t, command: hc.Command, device: hc.Device, ctx: vctx, eng: d.engines[hc.Engine], cancel: cancel,
		serveDone: make(chan struct{}), pds: map[uint32]*verbs.PD{}, segs: map[uint32]*segment{},
		mrs: map[uint32]*mrEntry{}, cqs: map[uint32]*cqEntry{}, qps: map[uint32]*qpEntry{}, nextID: hc.NextID, memBytes: hc.MemBytes}
	c.posted.Store(hc.Posted)
	c.completed.Store(hc.Comps)
	c.set.Store(&engineSet{})
	fail := func(err error) (*client, error) {
		c.dead = true
		cancel()
		conn.Close() // the process sees its daemon gone
		c.teardown()
		return nil, err
	}
	for _, id := range hc.PDs {
		pd, err := vctx.AllocPD()
		if err != nil {
			return fail(err)
		}
		c.pds[id] = pd
	}
	for _, s := range hc.Segs {
		f, err := take(s.FD)
		if err != nil {
			return fail(err)
		}
		seg, err := shmem.Map(f)
		if err != nil {
			return fail(err)
		}
		c.segs[s.ID] = &segment{seg: seg, size: uint64(len(seg.Mem))}
	}
	for _, m := range hc.MRs {
		s, pd := c.segs[m.Seg], c.pds[m.PD]
		if s == nil || pd == nil || m.Off > s.size || m.Len > s.size-m.Off {
			return fail(fmt.Errorf("mr %d: segment %d or pd %d missing, or out of bounds", m.ID, m.Seg, m.PD))
		}
		mr, err := pd.RestoreMR(s.seg.Mem[m.Off:m.Off+m.Len], m.IOVA, m.Access, m.LKey, m.RKey)
		if err != nil {
			return fail(fmt.Errorf("mr %d: %w", m.ID, err))
		}
		c.mrs[m.ID] = &mrEntry{mr: mr, seg: m.Seg}
		s.nmr++
		t.add(resMR, 1)
		t.add(resMemory, m.Len)
	}
	for _, q := range hc.CQs {
		f, err := take(q.FD)
		if err != nil {
			return fail(err)
		}
		seg, err := shmem.Map(f)
		if err != nil {
			return fail(err)
		}
		size, err := hwq.RegionSize(hwq.CQESize, ringCount(q.Depth))
		if err != nil || size > len(seg.Mem) {
			seg.Close()
			return fail(fmt.Errorf("cq %d: ring of %d bytes in a segment of %d", q.ID, size, len(seg.Mem)))
		}
		ring, err := hwq.Attach(seg.Mem[:size])
		var prod *hwq.Producer
		if err == nil {
			prod, err = ring.Producer()
		}
		if err != nil {
			seg.Close()
			return fail(fmt.Errorf("cq %d: %w", q.ID, err))
		}
		cq, err := vctx.CreateCQ(q.DaemonDepth)
		if err != nil {
			seg.Close()
			return fail(err)
		}
		e := &cqEntry{id: q.ID, depth: q.Depth, cq: cq, seg: seg, prod: prod, wcs: make([]verbs.WC, 64), arm: make(chan struct{}, 1), backlog: q.Backlog}
		c.cqs[q.ID] = e
		t.add(resCQ, 1)
	}
	for _, hq := range hc.QPs {
		if err := c.restoreQP(&hq, take); err != nil {
			return fail(fmt.Errorf("qp %#x: %w", hq.QPN, err))
		}
	}
	c.mu.Lock()
	c.engMu.Lock()
	c.publishLocked()
	c.engMu.Unlock()
	c.mu.Unlock()
	for _, e := range c.cqs {
		ctx, cancel := context.WithCancel(context.Background())
		e.cancel, e.stopped = cancel, make(chan struct{})
		go e.watch(ctx, c.eng.db.Mem)
	}
	c.eng.add(c)
	go c.events(cctx)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer conn.Close()
		c.serve(make([]byte, ibexdwire.MaxMessage))
	}()
	return c, nil
}

// restoreQP creates the QP with its number, moves it to the state it was
// in with its attributes (PSNs where the old engine stopped, so that the
// engine is right from its first packet), posts its receives again and
// imports the rest of its protocol state.
func (c *client) restoreQP(hq *handoverQP, take func(int) (int, error)) error {
	pd, scq, rcq := c.pds[hq.PD], c.cqs[hq.SendCQ], c.cqs[hq.RecvCQ]
	if pd == nil || scq == nil || rcq == nil {
		return fmt.Errorf("pd %d or cq %d/%d missing", hq.PD, hq.SendCQ, hq.RecvCQ)
	}
	f, err := take(hq.FD)
	if err != nil {
		return err
	}
	seg, err := shmem.Map(f)
	if err != nil {
		return err
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: scq.cq, RecvCQ: rcq.cq, Cap: hq.Cap, QPN: hq.QPN})
	if err != nil {
		seg.Close()
		return err
	}
	if hq.PSP != nil {
		if err := udp.RestorePSP(qp, *hq.PSP); err != nil {
			_ = qp.Destroy()
			seg.Close()
			return err
		}
	}
	q, err := attachQPEntry(qp, scq, rcq, seg, hq.RQOff)
	if err != nil {
		_ = qp.Destroy()
		seg.Close()
		return err
	}
	q.pd = hq.PD
	q.tenant = c.tenant
	c.qps[hq.QPN] = q
	c.tenant.add(resQP, 1)
	c.d.qpTenant.Store(hq.QPN, c.tenant)
	a := hq.Attr
	if hq.RC != nil {
		a.RQPSN, a.SQPSN = hq.RC.RecvPSN, hq.RC.SendPSN
	}
	steps := []struct {
		st   verbs.QPState
		mask verbs.AttrMask
	}{
		{verbs.QPSInit, verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPSRTR, verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPSRTS, verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
	}
	target := hq.Attr.State
	for _, s := range steps {
		if target == verbs.QPSReset || (target == verbs.QPSInit && s.st != verbs.QPSInit) ||
			(target == verbs.QPSRTR && s.st == verbs.QPSRTS) {
			break
		}
		if target == verbs.QPSErr && hq.RC == nil {
			break
		}
		a.State = s.st
		if err := qp.Modify(&a, verbs.AttrState|s.mask); err != nil {
			return fmt.Errorf("to %v: %w", s.st, err)
		}
	}
	if len(hq.Recvs) > 0 && target != verbs.QPSReset {
		if err := qp.PostRecv(hq.Recvs); err != nil {
			return fmt.Errorf("receives: %w", err)
		}
		for _, r := range hq.Recvs {
			q.posted.push(r.ID, r.SGL)
		}
	}
	if hq.RC != nil && (target == verbs.QPSRTS || target == verbs.QPSSQD) {
		if err := udp.RestoreQP(qp, *hq.RC); err != nil {
			return err
		}
	}
	switch target {
	case verbs.QPSSQD:
		err = qp.Modify(&verbs.QPAttr{State: verbs.QPSSQD}, verbs.AttrState)
	case verbs.QPSErr:
		err = qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState)
	}
	return err
}
