package daemon_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/daemon"
	"github.com/ibex-rdma/ibex/verbs"
)

// TestConfigPartitions: the partitions file gives each device the P_Key
// table of its address; a bad file, or one that leaves a device in no
// partition, is a config error naming the field, the file's line and the
// problem.
func TestConfigPartitions(t *testing.T) {
	t.Setenv("IBEX_UDP_ADDR", "")
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.conf", "Default=0x7fff : ALL=full;\nstorage=0x8001 : 127.0.0.81=full, ALL=limited;\n")
	yml := "devices:\n  - {name: udp0, address: 127.0.0.81}\n  - {name: udp1, address: 127.0.0.82}\npartitions: " + good + "\n"
	c, err := daemon.ParseConfig([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range [][]uint16{{0xffff, 0x8001}, {0xffff, 0x0001}} {
		if got, err := c.PKeys(c.Devices[i]); err != nil || !slices.Equal(got, want) {
			t.Errorf("devices[%d]: table %#04x, %v; want %#04x", i, got, err, want)
		}
	}
	for _, tc := range []struct{ file, want string }{
		{write("bad.conf", "Default=0x7fff : ALL=full;\n\nstorage : ALL;\n"), "bad.conf:3: partition \"storage\": no P_Key"},
		{write("none.conf", "storage=0x8001 : 127.0.0.81=full;\n"), "port 127.0.0.82 (GUID 0x0000ffff7f000052) is a member of no partition"},
		{filepath.Join(dir, "absent.conf"), "no such file"},
	} {
		yml := "devices:\n  - {name: udp0, address: 127.0.0.81}\n  - {name: udp1, address: 127.0.0.82}\npartitions: " + tc.file + "\n"
		_, err := daemon.ParseConfig([]byte(yml))
		if err == nil || !errors.Is(err, daemon.ErrConfig) || !strings.Contains(err.Error(), "partitions: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want a config error on partitions containing %q", filepath.Base(tc.file), err, tc.want)
		}
	}
}

// TestDaemonPartitions: a process attached to a daemon whose partitions
// file makes its port a full member of the default partition and a
// limited member of storage sees that table (QueryPKey through
// provider/ibexd); two of its QPs talk at index 0 (full–full) and do not
// at index 1 (limited–limited): the WRITE ends in RETRY_EXC_ERR, nothing
// is placed, and the daemon's port counts the P_Key violations.
func TestDaemonPartitions(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "partitions.conf")
	if err := os.WriteFile(conf, []byte("Default=0x7fff : ALL=full;\nstorage=0x8001 : ALL=limited;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	startDaemonConfig(t, "", "127.0.0.88", "devices:\n  - {name: udp0, address: 127.0.0.88}\npartitions: "+conf+"\n")
	a, b := openEnd(t, 4096), openEnd(t, 4096)
	pa, err := a.ctx.QueryPort(1)
	if err != nil || pa.PKeyTblLen != 2 {
		t.Fatalf("pkey_tbl_len %d (%v), want 2", pa.PKeyTblLen, err)
	}
	for i, want := range []uint16{0xffff, 0x0001} {
		if k, err := a.ctx.QueryPKey(1, i); err != nil || k != want {
			t.Errorf("QueryPKey(1, %d) = %#04x, %v; want %#04x", i, k, err, want)
		}
	}
	for i, talk := range []bool{true, false} {
		if i > 0 {
			a, b = openEnd(t, 4096), openEnd(t, 4096)
		}
		opt := verbs.ConnectOptions{Set: verbs.AttrPKeyIndex | verbs.AttrTimeout | verbs.AttrRetryCnt,
			Attr: verbs.QPAttr{PKeyIndex: uint16(i), Timeout: 12, RetryCnt: 1}}
		if err := a.qp.Connect(b.qp.Info(), opt); err != nil {
			t.Fatal(err)
		}
		if err := b.qp.Connect(a.qp.Info(), opt); err != nil {
			t.Fatal(err)
		}
		copy(a.mr.Bytes(), "in part.")
		w := verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL:        []verbs.SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey()}},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		if err := a.qp.PostSend([]verbs.SendWR{w}); err != nil {
			t.Fatal(err)
		}
		wc := make([]verbs.WC, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		n, err := a.cq.PollWait(ctx, wc)
		cancel()
		if err != nil || n != 1 {
			t.Fatalf("pkey_index %d: no completion: %v", i, err)
		}
		placed := string(b.mr.Bytes()[:8]) == "in part."
		if talk != (wc[0].Status == verbs.WCSuccess && placed) || !talk && wc[0].Status != verbs.WCRetryExcErr {
			t.Errorf("pkey_index %d: %v, placed %v; want talk %v (RETRY_EXC_ERR when not)", i, wc[0].Status, placed, talk)
		}
	}
	pcs, err := a.ctx.PortCounters(1)
	if err != nil {
		t.Fatal(err)
	}
	if k := slices.IndexFunc(pcs, func(c verbs.PortCounter) bool { return c.Name == "PKeyViolations" }); k < 0 || pcs[k].Value == 0 {
		t.Errorf("daemon port counters %v: no PKeyViolations", pcs)
	}
}

// TestTenantPartitionsTable: a tenant's partitions are checked against the
// P_Key the QP's pkey_index names in the daemon device's table, which the
// partitions file gives: with "first" at index 0 (indx0) and the default
// partition at 1, a tenant allowed only the default partition is refused
// index 0 and given index 1.
func TestTenantPartitionsTable(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "partitions.conf")
	if err := os.WriteFile(conf, []byte("first=0x0005, indx0 : ALL=full;\nDefault=0x7fff : ALL=full;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	startDaemonConfig(t, "", "127.0.0.89", "devices:\n  - {name: udp0, address: 127.0.0.89}\npartitions: "+conf+
		"\ntenants:\n  - name: blue\n    partitions: [default]\ndefault_tenant: blue\n")
	a, b := openEnd(t, 4096), openEnd(t, 4096)
	for i, want := range []uint16{0x8005, 0xffff} {
		if k, err := a.ctx.QueryPKey(1, i); err != nil || k != want {
			t.Fatalf("QueryPKey(1, %d) = %#04x, %v; want %#04x", i, k, err, want)
		}
	}
	err := a.qp.Connect(b.qp.Info(), verbs.ConnectOptions{Set: verbs.AttrPKeyIndex, Attr: verbs.QPAttr{PKeyIndex: 0}})
	if err == nil || !strings.Contains(err.Error(), "P_Key 0x8005, not a partition of tenant \"blue\"") {
		t.Errorf("pkey_index 0 (0x8005) for a tenant of the default partition: %v", err)
	}
	if err := a.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.Connect(b.qp.Info(), verbs.ConnectOptions{Set: verbs.AttrPKeyIndex, Attr: verbs.QPAttr{PKeyIndex: 1}}); err != nil {
		t.Errorf("pkey_index 1 (0xffff) for a tenant of the default partition: %v", err)
	}
}
