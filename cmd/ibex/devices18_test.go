package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// Issue 18, ibex devices: ibv_devinfo's habits. These run the command as a
// user does (runMain: a child process, its exit status, stdout and stderr).

// queryLoop0 returns loop0's device and port 1 attributes.
func queryLoop0(t *testing.T) (verbs.DeviceAttr, verbs.PortAttr) {
	t.Helper()
	c, err := verbs.Open("loop0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	p, err := c.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	return c.QueryDevice(), p
}

// loop0Summary is what ibv_devinfo's print_hca_cap prints without -v for
// a device with loop0's attributes, written out line by line from
// rdma-core's libibverbs/examples/devinfo.c (its printf formats), not
// from devices.go.
func loop0Summary(a verbs.DeviceAttr, p verbs.PortAttr) []string {
	guid := func(g uint64) string {
		return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48&0xffff, g>>32&0xffff, g>>16&0xffff, g&0xffff)
	}
	mtu := func(m verbs.MTU) string { return fmt.Sprintf("%d (%d)", 128<<m, m) }
	return []string{
		"hca_id:\tloop0",
		"\ttransport:\t\t\tInfiniBand (0)",
		"\tfw_ver:\t\t\t\t" + a.FWVersion,
		"\tnode_guid:\t\t\t" + guid(a.NodeGUID),
		"\tsys_image_guid:\t\t\t" + guid(a.SysImageGUID),
		fmt.Sprintf("\tvendor_id:\t\t\t0x%04x", a.VendorID),
		fmt.Sprintf("\tvendor_part_id:\t\t\t%d", a.VendorPartID),
		fmt.Sprintf("\thw_ver:\t\t\t\t0x%X", a.HWVersion),
		"\tboard_id:\t\t\tIBEX_LOOPBACK",
		"\tphys_port_cnt:\t\t\t1",
		"\t\tport:\t1",
		"\t\t\tstate:\t\t\tPORT_ACTIVE (4)",
		"\t\t\tmax_mtu:\t\t" + mtu(p.MaxMTU),
		"\t\t\tactive_mtu:\t\t" + mtu(p.ActiveMTU),
		fmt.Sprintf("\t\t\tsm_lid:\t\t\t%d", p.SMLID),
		fmt.Sprintf("\t\t\tport_lid:\t\t%d", p.LID),
		"\t\t\tport_lmc:\t\t0x00",
		"\t\t\tlink_layer:\t\tEthernet",
		"",
	}
}

func TestDevices18SummaryLayout(t *testing.T) {
	a, p := queryLoop0(t)
	want := loop0Summary(a, p)
	for _, args := range [][]string{
		{"devices", "-d", "loop0"},
		{"devices", "-d", "loopback/loop0"},
		{"devices", "--ib-dev", "loopback/loop0", "-i", "1"},
		{"devices", "--ib-dev=loop0", "--ib-port=1"},
	} {
		stdout, stderr, code := runMain(t, args...)
		if code != 0 || stderr != "" {
			t.Errorf("ibex %s: exit %d, stderr %q", strings.Join(args, " "), code, stderr)
			continue
		}
		got := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		for i := range max(len(got), len(want)) {
			var g, w string
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Errorf("ibex %s: line %d is %q, want %q (ibv_devinfo's summary)", strings.Join(args, " "), i+1, g, w)
			}
		}
	}
}

// Without -d, every device's summary, each ending with its ports' empty
// line, and nothing of -v.
func TestDevices18SummaryAllDevices(t *testing.T) {
	stdout, stderr, code := runMain(t, "devices")
	if code != 0 || stderr != "" {
		t.Fatalf("ibex devices: exit %d, stderr %q", code, stderr)
	}
	a, p := queryLoop0(t)
	if !strings.HasPrefix(stdout, strings.Join(loop0Summary(a, p), "\n")+"\n") {
		t.Errorf("ibex devices does not start with loop0's summary:\n%s", stdout)
	}
	for _, d := range verbs.Devices() {
		if !strings.Contains(stdout, "hca_id:\t"+d.Device+"\n") {
			t.Errorf("ibex devices lacks %s:\n%s", d.Device, stdout)
		}
	}
	if n := strings.Count(stdout, "hca_id:"); n != len(verbs.Devices()) {
		t.Errorf("%d hca_id lines, want %d", n, len(verbs.Devices()))
	}
	for _, verboseOnly := range []string{"max_qp:", "max_msg_sz:", "phys_state:", "provider:"} {
		if strings.Contains(stdout, verboseOnly) {
			t.Errorf("the summary has %q, which only -v prints:\n%s", verboseOnly, stdout)
		}
	}
	if !strings.HasSuffix(stdout, "link_layer:\t\tEthernet\n\n") {
		t.Errorf("the last port does not end with an empty line:\n%q", stdout)
	}
}

func TestDevices18List(t *testing.T) {
	want := fmt.Sprintf("%d HCAs found:\n", len(verbs.Devices()))
	for _, d := range verbs.Devices() {
		want += "\t" + d.Device + "\n"
	}
	want += "\n"
	for _, args := range [][]string{{"devices", "-l"}, {"devices", "--list"}, {"devices", "-l", "-v", "-d", "loop0"}} {
		stdout, stderr, code := runMain(t, args...)
		if code != 0 || stderr != "" || stdout != want {
			t.Errorf("ibex %s: exit %d, stderr %q, stdout %q, want %q", strings.Join(args, " "), code, stderr, stdout, want)
		}
	}
	var b strings.Builder
	if err := writeDeviceNames(&b, []verbs.DeviceName{{Provider: "udp", Device: "udp0"}}); err != nil || b.String() != "1 HCA found:\n\tudp0\n\n" {
		t.Errorf("one device: %q, %v; want ibv_devinfo's \"1 HCA found:\"", b.String(), err)
	}
}

// --table is ibv_devices' list (device, node GUID) with the provider and
// port states.
func TestDevices18Table(t *testing.T) {
	stdout, stderr, code := runMain(t, "devices", "--table")
	if code != 0 || stderr != "" {
		t.Fatalf("ibex devices --table: exit %d, stderr %q", code, stderr)
	}
	a, _ := queryLoop0(t)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 2+len(verbs.Devices()) || !strings.Contains(lines[0], "device") || !strings.Contains(lines[0], "node_guid") {
		t.Fatalf("want a header, a rule and a row per device:\n%s", stdout)
	}
	if f := strings.Fields(lines[2]); len(f) != 4 || f[1] != "loop0" || f[2] != formatGUID(a.NodeGUID) {
		t.Errorf("loop0's row %q", lines[2])
	}
}

func TestDevices18Port(t *testing.T) {
	stdout, stderr, code := runMain(t, "devices", "-v", "-i", "1")
	if code != 0 || stderr != "" {
		t.Fatalf("ibex devices -v -i 1: exit %d, stderr %q", code, stderr)
	}
	if n := strings.Count(stdout, "\t\tport:\t1\n"); n != len(verbs.Devices()) {
		t.Errorf("%d port 1 sections, want one per device:\n%s", n, stdout)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"devices", "-d", "loop0", "-i", "2"}, "ibex: port 2: device loop0 has ports 1..1 (-i PORT)\n"},
		{[]string{"devices", "-i", "300"}, "ibex: port 300: device loop0 has ports 1..1 (-i PORT)\n"},
		{[]string{"devices", "-i", "0"}, "ibex: port 0: ports are numbered from 1 (-i PORT)\n"},
		{[]string{"devices", "-i", "-1"}, "ibex: port -1: ports are numbered from 1 (-i PORT)\n"},
	} {
		stdout, stderr, code := runMain(t, tc.args...)
		if code == 0 || stderr != tc.want || stdout != "" {
			t.Errorf("ibex %s: exit %d, stdout %q, stderr %q; want a failure with %q and no output",
				strings.Join(tc.args, " "), code, stdout, stderr, tc.want)
		}
	}
}

// The -v fields issue 18 found missing, in ibv_devinfo -v's formats.
func TestDevices18VerboseFields(t *testing.T) {
	_, p := queryLoop0(t)
	stdout, stderr, code := runMain(t, "devices", "-v", "-d", "loop0")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, line := range []string{
		"\tboard_id:\t\t\tIBEX_LOOPBACK\n",
		"\t\t\tport_lmc:\t\t0x00\n",
		"\t\t\tactive_width:\t\t1X (1)\n",
		"\t\t\tphys_state:\t\tLINK_UP (5)\n",
		fmt.Sprintf("\t\t\tmax_msg_sz:\t\t0x%x\n", p.MaxMsgSize),
	} {
		if !strings.Contains(stdout, line) {
			t.Errorf("ibex devices -v lacks %q:\n%s", line, stdout)
		}
	}
	// ibv_devinfo -v's order: the summary's port lines, then max_msg_sz
	// first of the verbose ones, active_width before phys_state.
	order := []string{"port_lmc:", "link_layer:", "max_msg_sz:", "active_width:", "active_speed:", "phys_state:"}
	last := -1
	for _, s := range order {
		i := strings.Index(stdout, s)
		if i < last {
			t.Errorf("%s out of ibv_devinfo -v's order %v:\n%s", s, order, stdout)
		}
		last = i
	}
	if p.ActiveWidth != 1 || p.PhysState != 5 || p.LMC != 0 {
		t.Errorf("loop0 port 1: active_width %d, phys_state %d, lmc %d; want 1 (1X), 5 (LINK_UP), 0", p.ActiveWidth, p.PhysState, p.LMC)
	}
}

func TestDevices18DidYouMean(t *testing.T) {
	for _, tc := range []struct {
		dev, want string
	}{
		{"udp", `ibex: device "udp" not found; did you mean udp0? (devices: loopback/loop0, shm/shm0, udp/udp0)` + "\n"},
		{"loopback", `ibex: device "loopback" not found; did you mean loop0? (devices: loopback/loop0, shm/shm0, udp/udp0)` + "\n"},
		{"udp1", `ibex: device "udp1" not found; did you mean udp0? (devices: loopback/loop0, shm/shm0, udp/udp0)` + "\n"},
		{"shm/udp0", `ibex: device "shm/udp0" not found; did you mean udp/udp0? (devices: loopback/loop0, shm/shm0, udp/udp0)` + "\n"},
		{"mlx5_0", `ibex: device "mlx5_0" not found (devices: loopback/loop0, shm/shm0, udp/udp0)` + "\n"},
	} {
		for _, args := range [][]string{{"devices", "-d", tc.dev}, {"devices", "-v", "-d", tc.dev}, {"devices", "--table", "-d", tc.dev}} {
			stdout, stderr, code := runMain(t, args...)
			if code != 1 || stderr != tc.want || stdout != "" {
				t.Errorf("ibex %s: exit %d, stdout %q, stderr %q; want exit 1 and %q", strings.Join(args, " "), code, stdout, stderr, tc.want)
			}
		}
	}
}

func TestDevices18FindDevice(t *testing.T) {
	devs := []verbs.DeviceName{{Provider: "loopback", Device: "loop0"}, {Provider: "udp", Device: "udp0"}, {Provider: "udp", Device: "udp1"}}
	for _, tc := range []struct {
		name, found, err string
	}{
		{"udp1", "udp/udp1", ""},
		{"udp/udp1", "udp/udp1", ""},
		{"loopback/loop0", "loopback/loop0", ""},
		{"udp", "", "did you mean udp0 or udp1?"},
		{"udp/", "", "did you mean udp/udp0 or udp/udp1?"},
		{"loopback/udp0", "", "did you mean udp/udp0?"},
		{"/udp0", "", "did you mean udp/udp0?"},
		{"", "", `device "" not found (devices: loopback/loop0, udp/udp0, udp/udp1)`},
	} {
		d, err := findDevice(devs, tc.name)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("findDevice(%q): %v", tc.name, err)
		case tc.err == "" && d.Provider+"/"+d.Device != tc.found:
			t.Errorf("findDevice(%q) = %v, want %s", tc.name, d, tc.found)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("findDevice(%q) = %v, %v; want an error with %q", tc.name, d, err, tc.err)
		}
	}
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"udp", "udp0", 1}, {"udp0", "upd0", 2}, {"kitten", "sitting", 3}, {"", "abc", 3}} {
		if got := editDistance(tc.a, tc.b); got != tc.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.d)
		}
	}
}

// ibv_devinfo -v prints a RoCE v2 GID as inet_ntop does, with its type
// (rdma-core's print_formated_gid); an InfiniBand GID as eight groups.
func TestDevices18GIDText(t *testing.T) {
	for _, tc := range []struct {
		gid, ll, want string
	}{
		{"::ffff:127.0.0.1", "Ethernet", "::ffff:127.0.0.1, RoCE v2"},
		{"fe80::1", "Ethernet", "fe80::1, RoCE v2"},
		{"fe80::1", "InfiniBand", "fe80:0000:0000:0000:0000:0000:0000:0001"},
	} {
		g, err := verbs.ParseGID(tc.gid)
		if err != nil {
			t.Fatal(err)
		}
		if got := gidText(g, tc.ll); got != tc.want {
			t.Errorf("gidText(%s, %s) = %q, want %q", tc.gid, tc.ll, got, tc.want)
		}
	}
	out, errOut, code := runMainWithin(t, 20*time.Second, []string{"IBEX_UDP_ADDR=127.0.0.9"}, "devices", "-v", "-d", "udp0")
	if code != 0 {
		t.Fatalf("ibex devices -v -d udp0: exit %d: %s", code, errOut)
	}
	if want := "\t\t\tGID[  0]:\t\t::ffff:127.0.0.9, RoCE v2\n"; !strings.Contains(out, want) {
		t.Errorf("ibex devices -v -d udp0 lacks %q:\n%s", want, out)
	}
}
