package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/verbs"
)

// expandTabs replaces tabs with spaces at 8-column tab stops.
func expandTabs(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '\t' {
			b.WriteByte(' ')
			for b.Len()%8 != 0 {
				b.WriteByte(' ')
			}
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// parseDevinfo maps each "label:" of ibv_devinfo -v output to its value,
// prefixing port attributes with "port1." and so on, and checks that every
// value starts in ibv_devinfo's column: 40 for the device, 48 for a port.
func parseDevinfo(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	port := ""
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		label, value, ok := strings.Cut(strings.TrimLeft(line, "\t"), ":")
		if !ok {
			t.Fatalf("line %q has no label", line)
		}
		value = strings.TrimLeft(value, "\t")
		indent := len(line) - len(strings.TrimLeft(line, "\t"))
		switch {
		case label == "hca_id" || label == "port":
			if label == "port" {
				port = "port" + value + "."
			}
			m[label] = value
			continue
		case indent == 1 || indent == 3:
			col := map[int]int{1: 40, 3: 48}[indent]
			if got := strings.Index(expandTabs(line), value); got != col {
				t.Errorf("line %q: value starts in column %d, want %d", line, got, col)
			}
		default:
			t.Errorf("line %q: indented by %d tabs", line, indent)
		}
		if indent == 3 {
			label = port + label
		}
		m[label] = value
	}
	return m
}

func TestDevicesVerboseShowsQueryDevice(t *testing.T) {
	var buf bytes.Buffer
	if err := writeDevices(&buf, devicesOptions{Verbose: true, Device: "loop0"}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()

	c, err := verbs.Open("loop0")
	if err != nil {
		t.Fatal(err)
	}
	a := c.QueryDevice()
	p, err := c.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	guid := func(g uint64) string {
		return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, (g>>32)&0xffff, (g>>16)&0xffff, g&0xffff)
	}
	want := map[string]string{
		"hca_id":              "loop0",
		"provider":            c.Provider(),
		"transport":           a.Transport + " (0)",
		"fw_ver":              a.FWVersion,
		"node_guid":           guid(a.NodeGUID),
		"sys_image_guid":      guid(a.SysImageGUID),
		"vendor_id":           fmt.Sprintf("0x%04x", a.VendorID),
		"vendor_part_id":      fmt.Sprint(a.VendorPartID),
		"hw_ver":              fmt.Sprintf("0x%X", a.HWVersion),
		"board_id":            a.BoardID,
		"phys_port_cnt":       fmt.Sprint(a.PhysPortCnt),
		"max_mr_size":         fmt.Sprintf("0x%x", a.MaxMRSize),
		"page_size_cap":       fmt.Sprintf("0x%x", a.PageSizeCap),
		"max_qp":              fmt.Sprint(a.MaxQP),
		"max_qp_wr":           fmt.Sprint(a.MaxQPWR),
		"max_sge":             fmt.Sprint(a.MaxSGE),
		"max_cq":              fmt.Sprint(a.MaxCQ),
		"max_cqe":             fmt.Sprint(a.MaxCQE),
		"max_mr":              fmt.Sprint(a.MaxMR),
		"max_pd":              fmt.Sprint(a.MaxPD),
		"max_qp_rd_atom":      fmt.Sprint(a.MaxQPRdAtom),
		"max_qp_init_rd_atom": fmt.Sprint(a.MaxQPInitRdAtom),
		"max_inline_data":     fmt.Sprint(a.MaxInlineData),
		"atomic_cap":          fmt.Sprintf("%v (%d)", a.AtomicCap, a.AtomicCap),
		"ibex_caps":           fmt.Sprintf("%v (%#x)", a.Caps, uint32(a.Caps)),
		"port":                "1",
		"port1.state":         fmt.Sprintf("%v (%d)", p.State, p.State),
		"port1.max_mtu":       fmt.Sprintf("%d (%d)", p.MaxMTU.Bytes(), p.MaxMTU),
		"port1.active_mtu":    fmt.Sprintf("%d (%d)", p.ActiveMTU.Bytes(), p.ActiveMTU),
		"port1.sm_lid":        fmt.Sprint(p.SMLID),
		"port1.port_lid":      fmt.Sprint(p.LID),
		"port1.port_lmc":      fmt.Sprintf("0x%02x", p.LMC),
		"port1.max_msg_sz":    fmt.Sprintf("0x%x", p.MaxMsgSize),
		"port1.active_width":  "1X (1)",
		"port1.phys_state":    "LINK_UP (5)",
		"port1.gid_tbl_len":   fmt.Sprint(p.GIDTblLen),
		"port1.link_layer":    p.LinkLayer,
		"port1.active_speed":  p.ActiveSpeed,
		"port1.GID[  0]":      gidText(p.GID, p.LinkLayer),
	}
	got := parseDevinfo(t, out)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q (QueryDevice/QueryPort)", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected attribute %q", k)
		}
	}
	// Spot-check exact lines against ibv_devinfo -v.
	for _, line := range []string{
		"hca_id:\tloop0\n",
		"\tfw_ver:\t\t\t\t" + a.FWVersion + "\n",
		"\tmax_qp_init_rd_atom:\t\t" + fmt.Sprint(a.MaxQPInitRdAtom) + "\n",
		"\t\tport:\t1\n",
		"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
		"\t\t\tGID[  0]:\t\t" + gidText(p.GID, p.LinkLayer) + "\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("output lacks line %q:\n%s", line, out)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// As ibv_devinfo -d, -d picks the device and keeps the summary: only -v
// adds the limits.
func TestDevicesDeviceFlagKeepsSummary(t *testing.T) {
	out, err := run(t, "devices", "-d", "loop0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "hca_id:\tloop0\n") || strings.Contains(out, "\tmax_qp:") || strings.Count(out, "hca_id:") != 1 {
		t.Errorf("devices -d loop0 did not print loop0's summary alone:\n%s", out)
	}
}

func TestDevicesVerboseAll(t *testing.T) {
	out, err := run(t, "devices", "-v")
	if err != nil {
		t.Fatal(err)
	}
	if n, want := strings.Count(out, "hca_id:"), len(verbs.Devices()); n != want {
		t.Errorf("devices -v printed %d devices, want %d:\n%s", n, want, out)
	}
}

func TestDevicesTable(t *testing.T) {
	out, err := run(t, "devices", "--table")
	if err != nil {
		t.Fatal(err)
	}
	c, err := verbs.Open("loop0")
	if err != nil {
		t.Fatal(err)
	}
	a := c.QueryDevice()
	p, err := c.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2+len(verbs.Devices()) {
		t.Fatalf("want a header, a rule and one row per device, got:\n%s", out)
	}
	if f := strings.Fields(lines[0]); len(f) < 3 || f[0] != "provider" || f[1] != "device" || f[2] != "node_guid" {
		t.Errorf("header %q", lines[0])
	}
	var row []string
	for _, l := range lines[2:] {
		if f := strings.Fields(l); len(f) > 1 && f[1] == "loop0" {
			row = f
		}
	}
	want := []string{c.Provider(), "loop0", formatGUID(a.NodeGUID), "1:" + p.State.String()}
	if fmt.Sprint(row) != fmt.Sprint(want) {
		t.Errorf("loop0 row %q, want %q\n%s", row, want, out)
	}
}

func TestDevicesUnknownDevice(t *testing.T) {
	var buf bytes.Buffer
	err := writeDevices(&buf, devicesOptions{Device: "mlx5_9"})
	if err == nil {
		t.Fatalf("no error for an unknown device; output:\n%s", buf.String())
	}
	for _, s := range []string{`"mlx5_9"`, "not found", "loop0"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %s", err, s)
		}
	}
	if buf.Len() != 0 {
		t.Errorf("output for an unknown device: %q", buf.String())
	}
	if _, err := run(t, "devices", "-v", "-d", "nope"); err == nil {
		t.Error("ibex devices -v -d nope succeeded")
	}
}

func TestFormatGUID(t *testing.T) {
	if got := formatGUID(0x0c42_a103_00a1_b2c3); got != "0c42:a103:00a1:b2c3" {
		t.Errorf("formatGUID = %q", got)
	}
}
