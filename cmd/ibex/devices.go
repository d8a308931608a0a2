package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/provider/ibexd"
	"github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
)

// devicesOptions are ibv_devinfo's flags (-d, -i, -l, -v) and --table,
// the list ibv_devices prints with ibex's provider and port state.
type devicesOptions struct {
	Verbose bool   // -v: every attribute (ibv_devinfo -v)
	Device  string // -d: only this device, "udp0" or "udp/udp0"
	Port    int    // -i: only this port; 0 is every port
	PortSet bool   // -i was given (so -i 0 is an error, as in ibv_devinfo)
	List    bool   // -l: device names only (ibv_devinfo -l)
	Table   bool   // --table: one row per device (ibv_devices and more)
}

func newDevicesCmd() *cobra.Command {
	var opt devicesOptions
	cmd := &cobra.Command{
		Use:   "devices [-l | --table | [-v] [-d DEVICE] [-i PORT]]",
		Short: "Show RDMA devices as ibv_devinfo does (-l, --table for ibv_devices' list)",
		Long: "Print the devices of every registered provider as ibv_devinfo prints them:\n" +
			"by default its summary (hca_id, transport, fw_ver, node_guid, sys_image_guid,\n" +
			"vendor_id, vendor_part_id, hw_ver, board_id, phys_port_cnt, then per port\n" +
			"state, max_mtu, active_mtu, sm_lid, port_lid, port_lmc, link_layer); with -v\n" +
			"also the limits and port attributes ibex has, in ibv_devinfo -v's order and\n" +
			"format (ibv_devinfo's lines for what ibex lacks, max_ee and the like, are\n" +
			"left out), then ibex's own: provider, max_inline_data, ibex_caps and the\n" +
			"port counters.\n\n" +
			"-l prints only the names, as ibv_devinfo -l does (\"3 HCAs found:\").\n" +
			"--table prints ibv_devices' list, device and node GUID, with two more\n" +
			"columns: the provider and each port's state.\n\n" +
			"-d takes a device name (udp0) or provider/device (udp/udp0); a name that is\n" +
			"no device (-d udp) is an error that suggests the nearest devices and lists\n" +
			"them all. -i PORT shows only that port.\n\n" +
			"While ibexd answers on IBEX_DAEMON_SOCKET, its devices are listed too\n" +
			"(ibexd/udp0 beside the in-process udp/udp0), and every device gets a mode\n" +
			"line (a mode column with --table) saying how this process reaches it:\n" +
			"\"ibexd (daemon pid N, socket PATH, af_xdp|udp socket)\" or \"in-process\"\n" +
			"(for udp devices also \"(af_xdp|udp socket)\"). An in-process device whose\n" +
			"address the daemon holds is not opened: its mode line says it is\n" +
			"unavailable and why. A device that fails to open for another reason is\n" +
			"listed the same way, and the command then fails.\n\n" +
			"Examples:\n" +
			"  ibex devices\n" +
			"  ibex devices -l\n" +
			"  ibex devices --table\n" +
			"  ibex devices -v -d udp/udp0 -i 1",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opt.PortSet = cmd.Flags().Changed("ib-port")
			return writeDevices(cmd.OutOrStdout(), opt)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&opt.Verbose, "verbose", "v", false, "print every device and port attribute (ibv_devinfo -v)")
	f.StringVarP(&opt.Device, "ib-dev", "d", "", "only this device: NAME or PROVIDER/NAME (default all devices)")
	f.IntVarP(&opt.Port, "ib-port", "i", 0, "only this port of the device(s) (default all ports)")
	f.BoolVarP(&opt.List, "list", "l", false, "print only the device names (ibv_devinfo -l)")
	f.BoolVar(&opt.Table, "table", false, "one row per device: provider, device, node GUID, port states (ibv_devices)")
	// ibex devices had --device before it took ibv_devinfo's --ib-dev.
	f.StringVar(&opt.Device, "device", "", "same as --ib-dev")
	_ = f.MarkHidden("device")
	return cmd
}

// writeDevices prints what opt asks for. On a usage error (an unknown -d,
// a port the device lacks) it prints nothing: the whole output is built
// before any of it is written. A device that cannot be opened does not
// stop the listing: its entry says why. When the reason is that ibexd
// holds its address (the in-process udp0 beside ibexd/udp0), that is the
// device's state and no error; any other failure is returned after the
// listing is printed, so the command still fails.
func writeDevices(w io.Writer, opt devicesOptions) error {
	devs := verbs.Devices()
	if opt.List { // ibv_devinfo -l ignores every other flag
		return writeDeviceNames(w, devs)
	}
	if opt.Port < 0 || opt.PortSet && opt.Port == 0 {
		return fmt.Errorf("port %d: ports are numbered from 1 (-i PORT)", opt.Port)
	}
	if opt.Device != "" {
		d, err := findDevice(devs, opt.Device)
		if err != nil {
			return err
		}
		devs = []verbs.DeviceName{d}
	}
	if len(devs) == 0 {
		return fmt.Errorf("no devices found; is a provider registered?")
	}
	dv := lookDaemon()
	onlyPort := opt.Port
	if opt.Table { // the table has every port's state
		onlyPort = 0
	}
	infos := make([]deviceInfo, 0, len(devs))
	var openErrs []error
	showMode := dv.st != nil
	for _, d := range devs {
		info, err := probeDevice(d, dv, onlyPort)
		if err != nil {
			return err
		}
		if info.openErr != nil {
			openErrs = append(openErrs, info.openErr)
		}
		showMode = showMode || info.unavailable || info.provider == ibexdProvider
		infos = append(infos, info)
	}
	var buf bytes.Buffer
	if opt.Table {
		if err := writeDeviceTable(&buf, infos, showMode); err != nil {
			return err
		}
	} else {
		for _, info := range infos {
			if err := writeDeviceInfo(&buf, info, opt.Verbose, showMode); err != nil {
				return err
			}
		}
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return err
	}
	return errors.Join(openErrs...)
}

// writeDeviceNames prints ibv_devinfo -l: the count, then a name a line.
func writeDeviceNames(w io.Writer, devs []verbs.DeviceName) error {
	ew := &errWriter{w: w}
	plural := "s"
	if len(devs) == 1 {
		plural = ""
	}
	ew.printf("%d HCA%s found:\n", len(devs), plural)
	for _, d := range devs {
		ew.printf("\t%s\n", d.Device)
	}
	ew.printf("\n")
	return ew.err
}

// findDevice resolves -d: a device name, or provider/device. When it
// names no device, the error suggests the devices it is close to (a
// provider's name suggests that provider's devices) and lists them all.
func findDevice(devs []verbs.DeviceName, name string) (verbs.DeviceName, error) {
	prov, dev, qualified := strings.Cut(name, "/")
	for _, d := range devs {
		if d.Device == dev && d.Provider == prov || !qualified && d.Device == name {
			return d, nil
		}
	}
	if !qualified {
		dev = name
	}
	// Exact matches of the device part or a provider's name first; near
	// misses (two edits, or a prefix) only when there are none.
	var exact, near []string
	for _, d := range devs {
		n := d.Device
		if qualified {
			n = d.Provider + "/" + d.Device
		}
		switch {
		case d.Provider == dev || d.Device == dev || qualified && dev == "" && d.Provider == prov:
			exact = append(exact, n)
		case editDistance(d.Device, dev) <= 2 || len(dev) > 1 && strings.HasPrefix(d.Device, dev):
			near = append(near, n)
		}
	}
	if len(exact) > 0 {
		near = exact
	}
	msg := fmt.Sprintf("device %q not found", name)
	if len(near) > 0 {
		msg += "; did you mean " + strings.Join(near, " or ") + "?"
	}
	return verbs.DeviceName{}, fmt.Errorf("%s (devices: %s)", msg, deviceList(devs))
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func deviceList(devs []verbs.DeviceName) string {
	if len(devs) == 0 {
		return "none; is a provider registered?"
	}
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = d.Provider + "/" + d.Device
	}
	return strings.Join(names, ", ")
}

// The providers whose devices the mode lines describe by name: ibexd's
// devices are the daemon's, udp's may have their address held by it.
const (
	ibexdProvider = "ibexd"
	udpProvider   = "udp"
)

// daemonQueryTimeout bounds the status query to the daemon.
const daemonQueryTimeout = time.Second

// daemonView is what the daemon answering on this process's socket
// (IBEX_DAEMON_SOCKET) says about itself, for the mode lines.
type daemonView struct {
	st     *ibexdwire.Status // nil: no daemon answers
	socket string            // the socket it answered on
}

// lookDaemon asks the daemon on this process's socket for its status.
// It asks even with IBEX_DAEMON=off: a daemon this process ignores still
// holds its devices' addresses.
func lookDaemon() daemonView {
	path := ibexd.SocketPath()
	st, err := ibexd.QueryStatus(path, daemonQueryTimeout)
	if err != nil {
		return daemonView{}
	}
	return daemonView{st: st, socket: path}
}

// holder says why in-process device d must not be opened: a device of
// the daemon is bound to its address, so binding it would fail (and an
// AF_XDP twin would take the daemon's interface). "" when none is.
func (v daemonView) holder(d verbs.DeviceName) string {
	if v.st == nil || d.Provider != udpProvider {
		return ""
	}
	addr, ok := udp.DeviceAddr(d.Device)
	if !ok {
		return ""
	}
	for _, sd := range v.st.Devices {
		a, err := netip.ParseAddrPort(sd.Address)
		if err != nil || a.Port() != addr.Port() ||
			a.Addr().Unmap() != addr.Addr().Unmap() && !addr.Addr().IsUnspecified() {
			continue
		}
		use := "this process uses " + ibexdProvider + "/" + sd.Name
		if !ibexd.Enabled() {
			use = fmt.Sprintf("IBEX_DAEMON=%s keeps this process from using %s/%s", os.Getenv("IBEX_DAEMON"), ibexdProvider, sd.Name)
		}
		return fmt.Sprintf("ibexd pid %d holds %s; %s", v.st.PID, a, use)
	}
	return ""
}

// ibexdMode is the mode of the daemon's device dev: its pid, its socket
// and how it reaches the network.
func (v daemonView) ibexdMode(dev string) string {
	if v.st == nil { // it answered verbs.Devices, not the status query after
		return "ibexd"
	}
	parts := []string{fmt.Sprintf("daemon pid %d", v.st.PID), "socket " + v.socket}
	for _, sd := range v.st.Devices {
		if sd.Name == dev && sd.Mode != "" {
			parts = append(parts, netMode(sd.Mode))
		}
	}
	return "ibexd (" + strings.Join(parts, ", ") + ")"
}

// netMode says how a udp device reaches the network, from its mode
// (udp.DeviceMode, ibexd's DeviceStatus.Mode).
func netMode(m string) string {
	if m == "socket" {
		return "udp socket"
	}
	return m // "af_xdp"
}

// deviceInfo is what the views print of one device.
type deviceInfo struct {
	provider, name string // as its context names them
	attr           verbs.DeviceAttr
	ports          []portInfo
	// mode says how this process reaches the device: through ibexd (and
	// which) or in-process (and how a udp device reaches the network).
	mode string
	// unavailable: the device could not be opened; mode says why.
	unavailable bool
	// openErr is why it could not be opened, to fail the command with
	// after the listing; nil when a daemon holds it (its state, no error).
	openErr error
}

type portInfo struct {
	num  uint8
	attr verbs.PortAttr
	ctrs []verbs.PortCounter
}

// probeDevice opens d and reads its attributes and those of its ports
// (only port onlyPort, if not 0). A device that cannot be opened is no
// error: the info says why. The error is for what the user asked wrong
// (a port the device lacks) and for failures after opening.
func probeDevice(d verbs.DeviceName, dv daemonView, onlyPort int) (deviceInfo, error) {
	info := deviceInfo{provider: d.Provider, name: d.Device}
	kind := "in-process"
	if d.Provider == ibexdProvider {
		kind = ibexdProvider
	}
	if why := dv.holder(d); why != "" {
		info.unavailable, info.mode = true, kind+" (unavailable: "+why+")"
		return info, nil
	}
	c, err := verbs.Open(d.Provider + "/" + d.Device)
	if err != nil {
		info.unavailable, info.mode, info.openErr = true, kind+" (unavailable: "+err.Error()+")", err
		return info, nil
	}
	info.provider, info.name = c.Provider(), c.Name()
	switch {
	case d.Provider == ibexdProvider:
		info.mode = dv.ibexdMode(d.Device)
	case d.Provider == udpProvider && udp.DeviceMode(d.Device) != "":
		info.mode = kind + " (" + netMode(udp.DeviceMode(d.Device)) + ")"
	default:
		info.mode = kind
	}
	a := c.QueryDevice()
	info.attr = a
	if onlyPort > int(a.PhysPortCnt) {
		_ = c.Close()
		return info, fmt.Errorf("port %d: device %s has ports 1..%d (-i PORT)", onlyPort, c.Name(), a.PhysPortCnt)
	}
	for p := uint8(1); p <= a.PhysPortCnt; p++ {
		if onlyPort != 0 && int(p) != onlyPort {
			continue
		}
		pa, err := c.QueryPort(p)
		if err != nil {
			_ = c.Close()
			return info, err
		}
		// Port counters (IB names where they exist) where the provider
		// keeps them. A software device's counters live in the process
		// that opened it: these count what this process has done with it.
		ctrs, _ := c.PortCounters(p)
		info.ports = append(info.ports, portInfo{p, pa, ctrs})
	}
	return info, c.Close()
}

// writeDeviceTable prints one row per device: provider, device, node GUID
// and the state of each port, and with showMode how this process reaches
// it. A device that could not be opened has "-" for what it could not tell.
func writeDeviceTable(w io.Writer, infos []deviceInfo, showMode bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 4, ' ', 0)
	ew := &errWriter{w: tw}
	if showMode {
		ew.printf("provider\tdevice\tnode_guid\tport state\tmode\n")
		ew.printf("--------\t------\t---------\t----------\t----\n")
	} else {
		ew.printf("provider\tdevice\tnode_guid\tport state\n")
		ew.printf("--------\t------\t---------\t----------\n")
	}
	for _, info := range infos {
		guid, state := "-", "-"
		if !info.unavailable {
			var ports []string
			for _, p := range info.ports {
				ports = append(ports, fmt.Sprintf("%d:%v", p.num, p.attr.State))
			}
			guid, state = formatGUID(info.attr.NodeGUID), strings.Join(ports, " ")
		}
		if showMode {
			ew.printf("%s\t%s\t%s\t%s\t%s\n", info.provider, info.name, guid, state, info.mode)
		} else {
			ew.printf("%s\t%s\t%s\t%s\n", info.provider, info.name, guid, state)
		}
	}
	if ew.err != nil {
		return ew.err
	}
	return tw.Flush()
}

// writeDeviceInfo prints a device's attributes and those of its ports as
// ibv_devinfo does: the summary, or with verbose every attribute, in
// ibv_devinfo -v's order, followed by those only ibex has. Each port ends
// with an empty line, as in ibv_devinfo. With showMode (a daemon answers,
// so a device may be reached two ways) a mode line says how this process
// reaches the device: last of the summary's device lines, after provider
// with verbose. A device that could not be opened has its name, (with
// verbose) its provider and the mode line that says why, then an empty
// line.
func writeDeviceInfo(w io.Writer, info deviceInfo, verbose, showMode bool) error {
	ew := &errWriter{w: w}
	dev := func(label string, format string, args ...any) { attrLine(ew, 1, label, fmt.Sprintf(format, args...)) }
	ew.printf("hca_id:\t%s\n", info.name)
	if info.unavailable {
		if verbose {
			dev("provider", "%s", info.provider)
		}
		dev("mode", "%s", info.mode)
		ew.printf("\n")
		return ew.err
	}
	a := info.attr
	dev("transport", "%s", formatTransport(a.Transport))
	if a.FWVersion != "" {
		dev("fw_ver", "%s", a.FWVersion)
	}
	dev("node_guid", "%s", formatGUID(a.NodeGUID))
	dev("sys_image_guid", "%s", formatGUID(a.SysImageGUID))
	dev("vendor_id", "0x%04x", a.VendorID)
	dev("vendor_part_id", "%d", a.VendorPartID)
	dev("hw_ver", "0x%X", a.HWVersion)
	dev("board_id", "%s", a.BoardID)
	dev("phys_port_cnt", "%d", a.PhysPortCnt)
	if showMode && !verbose {
		dev("mode", "%s", info.mode)
	}
	if verbose {
		dev("max_mr_size", "0x%x", a.MaxMRSize)
		dev("page_size_cap", "0x%x", a.PageSizeCap)
		dev("max_qp", "%d", a.MaxQP)
		dev("max_qp_wr", "%d", a.MaxQPWR)
		dev("max_sge", "%d", a.MaxSGE)
		dev("max_cq", "%d", a.MaxCQ)
		dev("max_cqe", "%d", a.MaxCQE)
		dev("max_mr", "%d", a.MaxMR)
		dev("max_pd", "%d", a.MaxPD)
		dev("max_qp_rd_atom", "%d", a.MaxQPRdAtom)
		dev("max_qp_init_rd_atom", "%d", a.MaxQPInitRdAtom)
		dev("atomic_cap", "%v (%d)", a.AtomicCap, uint8(a.AtomicCap))
		// ibex's own, which ibv_devinfo has no line for.
		dev("provider", "%s", info.provider)
		if showMode {
			dev("mode", "%s", info.mode)
		}
		dev("max_inline_data", "%d", a.MaxInlineData)
		dev("ibex_caps", "%v (%#x)", a.Caps, uint32(a.Caps))
	}
	for _, p := range info.ports {
		pa := p.attr
		port := func(label string, format string, args ...any) { attrLine(ew, 3, label, fmt.Sprintf(format, args...)) }
		ew.printf("\t\tport:\t%d\n", p.num)
		port("state", "%v (%d)", pa.State, uint8(pa.State))
		port("max_mtu", "%v", pa.MaxMTU)
		port("active_mtu", "%v", pa.ActiveMTU)
		port("sm_lid", "%d", pa.SMLID)
		port("port_lid", "%d", pa.LID)
		port("port_lmc", "0x%02x", pa.LMC)
		port("link_layer", "%s", pa.LinkLayer)
		if verbose {
			port("max_msg_sz", "0x%x", pa.MaxMsgSize)
			port("gid_tbl_len", "%d", pa.GIDTblLen)
			port("active_width", "%sX (%d)", widthName(pa.ActiveWidth), pa.ActiveWidth)
			port("active_speed", "%s", pa.ActiveSpeed)
			if a.Transport == "InfiniBand" { // as ibv_devinfo: only for IB transport
				port("phys_state", "%s (%d)", physStateName(pa.PhysState), pa.PhysState)
			}
			if pa.GIDTblLen > 0 {
				port("GID[  0]", "%s", gidText(pa.GID, pa.LinkLayer))
			}
			for _, pc := range p.ctrs {
				port(pc.Name, "%d", pc.Value)
			}
		}
		ew.printf("\n")
	}
	return ew.err
}

// gidText is a GID as ibv_devinfo -v prints it (print_formated_gid): on
// Ethernet a RoCE v2 GID is an IPv6 address in inet_ntop's form with the
// type after it ("::ffff:10.0.0.1, RoCE v2"); on InfiniBand eight groups
// of four hex digits.
func gidText(g verbs.GID, linkLayer string) string {
	if linkLayer != "Ethernet" {
		return g.String()
	}
	return netip.AddrFrom16(g).String() + ", RoCE v2"
}

// widthName is the lane count of an ibv_port_attr.active_width code.
func widthName(w uint8) string {
	switch w {
	case 1:
		return "1"
	case 2:
		return "4"
	case 4:
		return "8"
	case 8:
		return "12"
	case 16:
		return "2"
	}
	return "invalid width"
}

// physStateName names an ibv_port_attr.phys_state as ibv_devinfo does.
func physStateName(s uint8) string {
	names := [...]string{1: "SLEEP", 2: "POLLING", 3: "DISABLED", 4: "PORT_CONFIGURATION TRAINNING",
		5: "LINK_UP", 6: "LINK_ERROR_RECOVERY", 7: "PHY TEST"}
	if int(s) < len(names) && names[s] != "" {
		return names[s]
	}
	return "invalid physical state"
}

// attrLine writes "label:" indented by indent tabs and padded with tabs so
// that the value starts in column 40 (device attributes, indent 1) or 48
// (port attributes, indent 3) at 8-column tab stops, as ibv_devinfo does.
func attrLine(ew *errWriter, indent int, label, value string) {
	target := 40
	if indent > 1 {
		target = 48
	}
	col := indent*8 + len(label) + 1 // +1 for the colon
	tabs := max((target-col/8*8)/8, 1)
	ew.printf("%s%s:%s%s\n", strings.Repeat("\t", indent), label, strings.Repeat("\t", tabs), value)
}

// formatGUID prints a GUID as ibv_devinfo does: four groups of four hex digits.
func formatGUID(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// formatTransport adds the ibv_transport_type number ibv_devinfo prints
// after the name. DeviceAttr carries only the name, so the number comes
// from libibverbs' enum.
func formatTransport(t string) string {
	switch t {
	case "InfiniBand":
		return t + " (0)"
	case "iWARP":
		return t + " (1)"
	case "usNIC":
		return t + " (2)"
	case "usNIC UDP":
		return t + " (3)"
	case "unspecified":
		return t + " (4)"
	}
	return t
}
