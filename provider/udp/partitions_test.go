package udp

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/rc/rctest"
	"github.com/ibex-rdma/ibex/verbs"
)

// TestPartitions: two devices whose ports have these P_Key tables
//
//	index   0       1       2       3
//	a       0xffff  0x8001  0x0002  0x8003
//	b       0xffff  0x0001  0x0002  0x8004
//
// and a pair of QPs per index. Full–full (0) and full–limited (1) pairs
// carry a WRITE; the limited–limited pair (2) and the pair in different
// partitions (3, b's table has no 0x8003 or 0x0003) do not: b drops a's
// request and counts it (PKeyViolations, in the port counters), nothing
// is placed, and a's WRITE ends in RETRY_EXC_ERR. QueryPKey reads the
// tables, and a pkey_index beyond one is refused.
func TestPartitions(t *testing.T) {
	da, db := newMemNet(1, rctest.Faults{}).devices(t)
	ta, tb := []uint16{0xffff, 0x8001, 0x0002, 0x8003}, []uint16{0xffff, 0x0001, 0x0002, 0x8004}
	if err := SetPartitions(da, ta); err != nil {
		t.Fatal(err)
	}
	if err := SetPartitions(db, tb); err != nil {
		t.Fatal(err)
	}
	ca, cb := memOpen(t, da), memOpen(t, db)
	defer func() {
		for _, c := range []*verbs.Context{ca, cb} {
			if err := c.Close(); err != nil {
				t.Error(err)
			}
		}
	}()
	for _, x := range []struct {
		c *verbs.Context
		t []uint16
	}{{ca, ta}, {cb, tb}} {
		pa, err := x.c.QueryPort(1)
		if err != nil || pa.PKeyTblLen != len(x.t) {
			t.Fatalf("%s: pkey_tbl_len %d (%v), want %d", x.c.Name(), pa.PKeyTblLen, err, len(x.t))
		}
		for i, want := range x.t {
			if k, err := x.c.QueryPKey(1, i); err != nil || k != want {
				t.Errorf("%s: QueryPKey(1, %d) = %#04x, %v; want %#04x", x.c.Name(), i, k, err, want)
			}
		}
		if _, err := x.c.QueryPKey(1, len(x.t)); err == nil || !strings.Contains(err.Error(), "has 4 entries") {
			t.Errorf("%s: QueryPKey beyond the table: %v", x.c.Name(), err)
		}
	}
	if err := SetPartitions(da, []uint16{0xffff}); err == nil || !strings.Contains(err.Error(), "already open") {
		t.Errorf("SetPartitions of an open device: %v", err)
	}

	for i, talk := range []bool{true, true, false, false} {
		before, _ := Counters(db)
		ea, eb := newResetEnd(t, ca), newResetEnd(t, cb)
		opt := verbs.ConnectOptions{Set: verbs.AttrPKeyIndex | verbs.AttrTimeout | verbs.AttrRetryCnt,
			Attr: verbs.QPAttr{PKeyIndex: uint16(i), Timeout: 12, RetryCnt: 1}}
		connectPair(t, ea, eb, opt)
		copy(ea.mr.Bytes(), "p_key ok")
		w := verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL:        []verbs.SGE{{Addr: ea.mr.Addr(), Length: 8, LKey: ea.mr.LKey()}},
			RemoteAddr: eb.mr.Addr(), RKey: eb.mr.RKey()}
		if err := ea.qp.PostSend([]verbs.SendWR{w}); err != nil {
			t.Fatal(err)
		}
		wc := make([]verbs.WC, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		n, err := ea.cq.PollWait(ctx, wc)
		cancel()
		if err != nil || n != 1 {
			t.Fatalf("index %d (%#04x to %#04x): no completion: %v", i, ta[i], tb[i], err)
		}
		after, _ := Counters(db)
		placed := string(eb.mr.Bytes()[:8]) == "p_key ok"
		viol := after.PKeyViolations - before.PKeyViolations
		if talk {
			if wc[0].Status != verbs.WCSuccess || !placed || viol != 0 {
				t.Errorf("index %d (%#04x to %#04x): %v, placed %v, %d P_Key violations; want SUCCESS, placed, none", i, ta[i], tb[i], wc[0].Status, placed, viol)
			}
		} else {
			if wc[0].Status != verbs.WCRetryExcErr || placed || viol == 0 {
				t.Errorf("index %d (%#04x to %#04x): %v, placed %v, %d P_Key violations; want RETRY_EXC_ERR, nothing placed, violations counted", i, ta[i], tb[i], wc[0].Status, placed, viol)
			}
			pcs, err := cb.PortCounters(1)
			if err != nil {
				t.Fatal(err)
			}
			if k := slices.IndexFunc(pcs, func(c verbs.PortCounter) bool { return c.Name == "PKeyViolations" }); k < 0 || pcs[k].Value < viol {
				t.Errorf("port counters %v: PKeyViolations missing or below %d", pcs, viol)
			}
		}
		ea.destroy(t)
		eb.destroy(t)
	}

	// pkey_index beyond the table.
	e := newResetEnd(t, ca)
	defer e.destroy(t)
	err := e.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PKeyIndex: 4, Port: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags)
	if err == nil || !strings.Contains(err.Error(), "pkey_index 4: port 1's P_Key table has 4 entries") {
		t.Errorf("pkey_index 4: %v", err)
	}
}

// TestPartitionsEnv: a process without a daemon takes its devices' tables
// from the partitions.conf IBEX_UDP_PARTITIONS names (10.0.0.1 is a full
// member of storage, 10.0.0.2 a limited one); a bad file fails the open
// with an error naming the variable, the file's line and the problem.
func TestPartitionsEnv(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "partitions.conf")
	if err := os.WriteFile(good, []byte("Default=0x7fff : ALL=full;\nstorage=0x8001 : 10.0.0.1=full, ALL=limited;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(PartitionsEnv, good)
	da, db := newMemNet(2, rctest.Faults{}).devices(t)
	for _, x := range []struct {
		dev  string
		want []uint16
	}{{da, []uint16{0xffff, 0x8001}}, {db, []uint16{0xffff, 0x0001}}} {
		c := memOpen(t, x.dev)
		pa, _ := c.QueryPort(1)
		var got []uint16
		for i := range pa.PKeyTblLen {
			k, err := c.QueryPKey(1, i)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, k)
		}
		if !slices.Equal(got, x.want) {
			t.Errorf("%s: table %#04x, want %#04x", x.dev, got, x.want)
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
	bad := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(bad, []byte("Default=0x7fff : ALL=full;\nstorage : ALL;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(PartitionsEnv, bad)
	dc, _ := newMemNet(3, rctest.Faults{}).devices(t)
	_, err := verbs.Open("udp/" + dc)
	if err == nil || !strings.Contains(err.Error(), PartitionsEnv) || !strings.Contains(err.Error(), "bad.conf:2: partition \"storage\": no P_Key") {
		t.Errorf("open with a bad %s: %v", PartitionsEnv, err)
	}
}
