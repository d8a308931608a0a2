package oob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Handshake performs, in perftest 4.5's order, exchange_versions (then
// check_version_compatibility), check_sys_data and check_mtu, and returns the
// peer's values; Negotiate(local, remote) gives what both ends then use. When
// the peer is ibex too, the two ends also exchange and compare their Test
// right after the versions, and a difference is a *MismatchError.
func (c *Conn) Handshake(ctx context.Context, local Params) (remote Params, err error) {
	if err := c.begin("Handshake", stateNew); err != nil {
		return Params{}, err
	}
	local = local.withDefaults()
	if err := local.validate(); err != nil {
		return Params{}, c.errorf("Handshake", err)
	}
	c.local = local

	// exchange_versions: ctx_xchg_data(version, rem_version, 16).
	in := make([]byte, versionSize)
	if err := c.do(ctx, "exchange_versions", func() error {
		return c.xchg(encodeVersion(), in, "16-byte version")
	}); err != nil {
		return Params{}, err
	}
	text, v, ext, perr := parseVersion(in)
	if perr == nil && v < minPeerVersion {
		perr = wrapf(ErrVersion, "peer runs perftest protocol version %q; perftest 4.5 (%s) and ibex need at least %.2f", text, Version, minPeerVersion)
	}
	if perr != nil {
		return Params{}, c.fail("check_version_compatibility", perr)
	}
	remote.Version = text
	c.ext = min(ext, ibexProtocol)

	// ibex extension: only when both ends carry the marker.
	if c.ext >= 1 {
		in := make([]byte, testMsgSize)
		if err := c.do(ctx, "ibex test exchange", func() error {
			return c.xchg(encodeTest(local.Test, local.GIDIndex == -1), in, "64-byte ibex test description")
		}); err != nil {
			return Params{}, err
		}
		t, noGID, err := parseTest(in)
		if err == nil {
			if d := compareTests(local.Test, t, local.GIDIndex == -1, noGID); len(d) > 0 {
				err = &MismatchError{Diffs: d}
			}
		}
		if err != nil {
			return Params{}, c.fail("ibex test exchange", err)
		}
		remote.Test, remote.Ibex = t, true
		if noGID {
			remote.GIDIndex = -1
		}
	}

	// check_sys_data: cycle_buffer, then cache_line_size, 4 bytes big-endian each.
	cb, cl := make([]byte, 4), make([]byte, 4)
	if err := c.do(ctx, "check_sys_data", func() error {
		if err := c.xchg(encodeInt32(local.CycleBuffer), cb, "cycle_buffer"); err != nil {
			return err
		}
		return c.xchg(encodeInt32(local.CacheLineSize), cl, "cache_line_size")
	}); err != nil {
		return Params{}, err
	}
	remote.CycleBuffer, remote.CacheLineSize = decodeInt32(cb), decodeInt32(cl)

	// check_mtu: "%d" of the ibv_mtu enum, 2 bytes.
	mtu := make([]byte, mtuSize)
	if err := c.do(ctx, "check_mtu", func() error {
		return c.xchg(encodeMTU(local.MTU), mtu, "2-byte MTU")
	}); err != nil {
		return Params{}, err
	}
	if remote.MTU, err = parseMTU(mtu); err != nil {
		return Params{}, c.fail("check_mtu", err)
	}
	c.remote = remote
	c.state = stateParams
	return remote, nil
}

// fail records a failure found in received data and closes the connection,
// as perftest exits.
func (c *Conn) fail(step string, err error) error {
	c.err = err
	_ = c.nc.Close()
	return c.errorf(step, err)
}

// ExchangeDests exchanges every QP's dest before the QPs are connected:
// perftest's first loop of ctx_hand_shake over the QPs (ib_write_lat sends
// QP 0 once more before it). It returns the peer's dests, one per QP; the
// caller then moves its QPs to RTR/RTS and calls Ready.
//
// As perftest, it refuses GIDs of different types (IPv4-mapped against not,
// ctx_check_gid_compatibility). It also refuses a peer that sends the same
// QP twice, which means the two ends use different numbers of QPs.
func (c *Conn) ExchangeDests(ctx context.Context, local []Dest) ([]Dest, error) {
	const step = "ctx_hand_shake"
	if err := c.begin("ExchangeDests", stateParams); err != nil {
		return nil, err
	}
	if len(local) == 0 || len(local) > maxQPs {
		return nil, c.errorf("ExchangeDests", wrapf(ErrInvalid, "%d dests: want 1..%d", len(local), maxQPs))
	}
	if isLat(c.local.Test.Name) && len(local) != 1 {
		return nil, c.errorf("ExchangeDests", wrapf(ErrInvalid, "%d dests: perftest's latency tests use one QP", len(local)))
	}
	if q := c.local.Test.QPs; q != 0 && q != len(local) {
		return nil, c.errorf("ExchangeDests", wrapf(ErrInvalid, "%d dests for Test.QPs %d", len(local), q))
	}
	gid := c.local.GIDIndex != -1
	keys := make([][]byte, len(local))
	for i, d := range local {
		k, err := appendDest(nil, d, gid)
		if err != nil {
			return nil, c.errorf("ExchangeDests", fmt.Errorf("qp %d: %w", i, err))
		}
		keys[i] = k
	}
	remote := make([]Dest, len(local))
	var lead Dest
	err := c.do(ctx, step, func() error {
		if isLat(c.local.Test.Name) {
			var err error
			if lead, err = c.handShake(keys[0], "dest of QP 0 (the exchange before the QP loop)"); err != nil {
				return err
			}
		}
		for i := range keys {
			var err error
			if remote[i], err = c.handShake(keys[i], fmt.Sprintf("dest of QP %d (round 1)", i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if isLat(c.local.Test.Name) && lead != remote[0] {
		return nil, c.fail(step, desync("QP 0", lead, remote[0]))
	}
	seen := make(map[uint32]int, len(remote))
	for i, d := range remote {
		if j, ok := seen[d.QPN]; ok {
			return nil, c.fail(step, wrapf(ErrMismatch,
				"the peer sent QPN %#x for QP %d and QP %d: it uses fewer QPs than our %d (-q differs?)", d.QPN, j, i, len(local)))
		}
		seen[d.QPN] = i
	}
	if gid && gidIsIPv4(local[0].GID) != gidIsIPv4(remote[0].GID) {
		return nil, c.fail("ctx_check_gid_compatibility", wrapf(ErrMismatch,
			"GID types differ: ours %s, the peer's %s; one is IPv4-mapped and the other is not (perftest refuses this too: use the same IP version on both ends)",
			gidString(local[0].GID), gidString(remote[0].GID)))
	}
	c.localDests = append([]Dest(nil), local...)
	c.remoteDests = append([]Dest(nil), remote...)
	c.key0 = keys[0]
	c.state = stateDests
	return remote, nil
}

// Ready is called once the local QPs are in RTR/RTS: it performs perftest's
// second loop of ctx_hand_shake over the QPs and the "additional handshake
// after moving qp to RTR" (ib_send_bw does the latter first). After it the
// peer may send. The peer's second-round dests must equal the first.
func (c *Conn) Ready(ctx context.Context) error {
	const step = "ctx_hand_shake"
	if err := c.begin("Ready", stateDests); err != nil {
		return err
	}
	round2 := func() error {
		for i, want := range c.remoteDests {
			k, _ := appendDest(nil, c.localDests[i], c.local.GIDIndex != -1)
			got, err := c.handShake(k, fmt.Sprintf("dest of QP %d (round 2)", i))
			if err != nil {
				return err
			}
			if got != want {
				return desync(fmt.Sprintf("QP %d", i), want, got)
			}
		}
		return nil
	}
	err := c.do(ctx, step, func() error {
		if c.local.Test.Name == SendBW {
			if err := c.sync("after RTR"); err != nil {
				return err
			}
			return round2()
		}
		if err := round2(); err != nil {
			return err
		}
		return c.sync("after RTR")
	})
	if err != nil {
		return err
	}
	c.state = stateReady
	return nil
}

// StartRun performs what perftest exchanges right before a measured run (each
// size with -a): the sync after posting receives in ib_send_bw, the sync
// before a bidirectional run in the other bandwidth tests; nothing otherwise.
func (c *Conn) StartRun(ctx context.Context) error {
	if err := c.begin("StartRun", stateReady); err != nil {
		return err
	}
	t := c.local.Test
	if t.Name == SendBW || (t.Duplex && !isLat(t.Name)) {
		return c.do(ctx, "ctx_hand_shake", func() error { return c.sync("before the run") })
	}
	return nil
}

// EndRun performs what perftest exchanges right after a measured run: for
// bidirectional bandwidth tests the two reports (xchg_bw_reports; ib_send_bw
// skips them with -D), with -a a sync (ib_send_bw always, the others when
// bidirectional). exchanged tells whether remote holds the peer's report.
func (c *Conn) EndRun(ctx context.Context, local Report) (remote Report, exchanged bool, err error) {
	if err := c.begin("EndRun", stateReady); err != nil {
		return Report{}, false, err
	}
	t := c.local.Test
	switch t.Name {
	case WriteBW, ReadBW:
		if t.Duplex {
			if t.AllSizes {
				if err := c.do(ctx, "ctx_hand_shake", func() error { return c.sync("after the run") }); err != nil {
					return Report{}, false, err
				}
			}
			remote, err = c.ExchangeReport(ctx, local)
			return remote, err == nil, err
		}
	case AtomicBW:
		if t.Duplex {
			remote, err = c.ExchangeReport(ctx, local)
			return remote, err == nil, err
		}
	case SendBW:
		if t.Duplex && t.Duration == 0 {
			if remote, err = c.ExchangeReport(ctx, local); err != nil {
				return Report{}, false, err
			}
			exchanged = true
		}
		if t.AllSizes {
			if err := c.do(ctx, "ctx_hand_shake", func() error { return c.sync("after the run") }); err != nil {
				return Report{}, false, err
			}
		}
		return remote, exchanged, nil
	}
	return Report{}, false, nil
}

// Finish ends the test as perftest does and closes the connection. For
// unidirectional ib_write_bw, ib_read_bw and ib_atomic_bw, the ends first
// sync and exchange reports: a perftest server prints the client's report, so
// a client passes its (last) report, and a server gets the client's in
// remote (a perftest server sends an uninitialised one). Then, except for
// ib_write_lat, which just exits, ctx_close_connection: a sync, "done", close.
func (c *Conn) Finish(ctx context.Context, local Report) (remote Report, err error) {
	if err := c.begin("Finish", stateReady); err != nil {
		return Report{}, err
	}
	t := c.local.Test
	if t.Name == WriteLat {
		return Report{}, c.Close()
	}
	if !t.Duplex && t.Name != SendBW && !isLat(t.Name) {
		if err := c.do(ctx, "ctx_hand_shake", func() error { return c.sync("at the end of the test") }); err != nil {
			return Report{}, err
		}
		if remote, err = c.ExchangeReport(ctx, local); err != nil {
			return Report{}, err
		}
	}
	err = c.do(ctx, "ctx_close_connection", func() error {
		if err := c.sync("closing"); err != nil {
			return err
		}
		// The peer answered the last sync: it has finished, and may already
		// have closed; its "done" is not waited for, as in perftest.
		if err := c.write([]byte(doneMsg), `"done"`); err != nil && !errors.Is(err, ErrPeerClosed) {
			return err
		}
		return nil
	})
	if err != nil {
		return Report{}, err
	}
	c.drainDone(ctx)
	return remote, c.Close()
}

// doneMsg is what ctx_close_connection writes after its handshake:
// write(sockfd, "done", 5), the NUL included. It does not read the peer's.
const doneMsg = "done\x00"

// drainDone half-closes and reads the peer's "done" until it closes, briefly,
// so the peer's last write never meets a reset. Errors do not matter here.
func (c *Conn) drainDone(ctx context.Context) {
	_ = c.nc.CloseWrite()
	dl := time.Now().Add(2 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = c.nc.SetReadDeadline(dl)
	var buf [64]byte
	for n := 0; n < 64; {
		m, err := c.nc.Read(buf[n:])
		n += m
		if err != nil {
			return
		}
	}
}

// Sync is one ctx_hand_shake of QP 0's dest, the barrier perftest uses
// between phases. StartRun, EndRun and Finish already perform the ones
// perftest does; Sync is for sequences they do not cover.
func (c *Conn) Sync(ctx context.Context) error {
	if err := c.begin("Sync", stateReady); err != nil {
		return err
	}
	return c.do(ctx, "ctx_hand_shake", func() error { return c.sync("sync") })
}

// ExchangeReport is perftest's xchg_bw_reports: five 8-byte big-endian
// values, each in its own ctx_xchg_data.
func (c *Conn) ExchangeReport(ctx context.Context, local Report) (Report, error) {
	if err := c.begin("ExchangeReport", stateReady); err != nil {
		return Report{}, err
	}
	out := local.fields()
	var in [5][8]byte
	err := c.do(ctx, "xchg_bw_reports", func() error {
		for i := range out {
			if err := c.xchg(out[i][:], in[i][:], reportFieldNames[i]+" of the bandwidth report"); err != nil {
				return err
			}
			if i == 0 && bytes.HasPrefix(in[0][:], []byte(doneMsg)) {
				return wrapf(ErrMismatch, `the peer sent "done" instead of a bandwidth report: it ended its test (a latency test, or -b on one end only?)`)
			}
		}
		return nil
	})
	if err != nil {
		return Report{}, err
	}
	return reportFrom(in), nil
}

// sync is one ctx_hand_shake(my_dest[0], rem_dest[0]); the peer must answer
// with its QP 0 dest.
func (c *Conn) sync(what string) error {
	got, err := c.handShake(c.key0, "QP 0 dest ("+what+")")
	if err != nil {
		return err
	}
	if want := c.remoteDests[0]; got != want {
		return desync("QP 0 (sync "+what+")", want, got)
	}
	return nil
}

// handShake is one ctx_hand_shake over the socket: ethernet_write_keys and
// ethernet_read_keys, the client writing first.
func (c *Conn) handShake(key []byte, what string) (Dest, error) {
	if c.server {
		d, err := c.readDest(what)
		if err != nil {
			return Dest{}, err
		}
		return d, c.write(key, what)
	}
	if err := c.write(key, what); err != nil {
		return Dest{}, err
	}
	return c.readDest(what)
}

// readDest reads one dest message. It reads the short size first, so a peer
// using the other format (GID or not) is reported instead of waited for.
func (c *Conn) readDest(what string) (Dest, error) {
	buf := make([]byte, keyMsgSizeGID)
	short := buf[:keyMsgSize]
	if err := c.read(short, what); err != nil {
		return Dest{}, err
	}
	if bytes.HasPrefix(short, []byte(doneMsg)) {
		return Dest{}, wrapf(ErrMismatch, `waiting for the peer's %s, it sent "done": it ended its test (the two ends run different tests or options)`, what)
	}
	shortFmt := short[keyMsgSize-1] == 0
	gid := c.local.GIDIndex != -1
	switch {
	case gid && shortFmt:
		if _, err := parseDest(short); err == nil {
			return Dest{}, wrapf(ErrMismatch, "the peer sent its %s without a GID (perftest without a GID index, InfiniBand without -x); this end uses GIDs", what)
		}
		return Dest{}, wrapf(ErrProtocol, "waiting for the peer's %s, got %s", what, quote(short))
	case !gid && !shortFmt:
		return Dest{}, wrapf(ErrMismatch, "the peer sent its %s with a GID (RoCE, or -x); this end has gid_index -1", what)
	case gid:
		if err := c.read(buf[keyMsgSize:], what); err != nil {
			return Dest{}, err
		}
	default:
		buf = short
	}
	d, err := parseDest(buf)
	if err != nil {
		return Dest{}, fmt.Errorf("the peer's %s: %w", what, err)
	}
	return d, nil
}

func desync(what string, want, got Dest) error {
	return wrapf(ErrMismatch, "the peer's %s changed: first %v, now %v; the ends are at different steps (different tests, -q, -a or -b?)", what, want, got)
}

func gidString(g [16]byte) string { return netip.AddrFrom16(g).String() }
