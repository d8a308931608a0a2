package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/ibex-rdma/ibex/verbs"
)

type devicesOptions struct {
	Verbose bool   // ibv_devinfo -v layout
	Device  string // only this device; implies Verbose
}

// writeDevices prints the devices of every registered provider: a table by
// default, the ibv_devinfo -v layout with Verbose or Device set.
func writeDevices(w io.Writer, opt devicesOptions) error {
	devs := verbs.Devices()
	if opt.Device != "" {
		var found []verbs.DeviceName
		for _, d := range devs {
			if d.Device == opt.Device {
				found = append(found, d)
			}
		}
		if len(found) == 0 {
			return fmt.Errorf("device %q not found (devices: %s)", opt.Device, deviceList(devs))
		}
		devs = found
	}
	if opt.Verbose || opt.Device != "" {
		for i, d := range devs {
			if i > 0 {
				if _, err := io.WriteString(w, "\n"); err != nil {
					return err
				}
			}
			if err := writeDeviceInfo(w, d.Device); err != nil {
				return err
			}
		}
		return nil
	}
	return writeDeviceTable(w, devs)
}

func deviceList(devs []verbs.DeviceName) string {
	if len(devs) == 0 {
		return "none; is a provider registered?"
	}
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = d.Device
	}
	return strings.Join(names, ", ")
}

// writeDeviceTable prints one row per device: provider, device, node GUID
// and the state of each port.
func writeDeviceTable(w io.Writer, devs []verbs.DeviceName) error {
	tw := tabwriter.NewWriter(w, 0, 8, 4, ' ', 0)
	ew := &errWriter{w: tw}
	ew.printf("provider\tdevice\tnode_guid\tport state\n")
	ew.printf("--------\t------\t---------\t----------\n")
	for _, d := range devs {
		c, err := verbs.Open(d.Device)
		if err != nil {
			return err
		}
		attr := c.QueryDevice()
		var ports []string
		for p := uint8(1); p <= attr.PhysPortCnt; p++ {
			pa, err := c.QueryPort(p)
			if err != nil {
				_ = c.Close()
				return err
			}
			ports = append(ports, fmt.Sprintf("%d:%v", p, pa.State))
		}
		if err := c.Close(); err != nil {
			return err
		}
		ew.printf("%s\t%s\t%s\t%s\n", c.Provider(), c.Name(), formatGUID(attr.NodeGUID), strings.Join(ports, " "))
	}
	if ew.err != nil {
		return ew.err
	}
	return tw.Flush()
}

// writeDeviceInfo opens device and prints its attributes and those of each
// of its ports in the layout of ibv_devinfo -v.
func writeDeviceInfo(w io.Writer, device string) error {
	c, err := verbs.Open(device)
	if err != nil {
		return err
	}
	a := c.QueryDevice()
	ports := make([]verbs.PortAttr, a.PhysPortCnt)
	for i := range ports {
		if ports[i], err = c.QueryPort(uint8(i + 1)); err != nil {
			_ = c.Close()
			return err
		}
	}
	if err := c.Close(); err != nil {
		return err
	}

	ew := &errWriter{w: w}
	dev := func(label string, format string, args ...any) { attrLine(ew, 1, label, fmt.Sprintf(format, args...)) }
	port := func(label string, format string, args ...any) { attrLine(ew, 3, label, fmt.Sprintf(format, args...)) }
	ew.printf("hca_id:\t%s\n", c.Name())
	dev("provider", "%s", c.Provider())
	dev("transport", "%s", formatTransport(a.Transport))
	dev("fw_ver", "%s", a.FWVersion)
	dev("node_guid", "%s", formatGUID(a.NodeGUID))
	dev("sys_image_guid", "%s", formatGUID(a.SysImageGUID))
	dev("vendor_id", "0x%04x", a.VendorID)
	dev("vendor_part_id", "%d", a.VendorPartID)
	dev("hw_ver", "0x%X", a.HWVersion)
	dev("phys_port_cnt", "%d", a.PhysPortCnt)
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
	dev("max_inline_data", "%d", a.MaxInlineData)
	dev("max_msg_sz", "0x%x", a.MaxMsgSize)
	dev("atomic_cap", "%v (%d)", a.AtomicCap, uint8(a.AtomicCap))
	dev("ibex_caps", "%v (%#x)", a.Caps, uint32(a.Caps))
	for i, p := range ports {
		ew.printf("\t\tport:\t%d\n", i+1)
		port("state", "%v (%d)", p.State, uint8(p.State))
		port("max_mtu", "%v", p.MaxMTU)
		port("active_mtu", "%v", p.ActiveMTU)
		port("sm_lid", "%d", p.SMLID)
		port("port_lid", "%d", p.LID)
		port("gid_tbl_len", "%d", p.GIDTblLen)
		port("link_layer", "%s", p.LinkLayer)
		port("active_speed", "%s", p.ActiveSpeed)
		if p.GIDTblLen > 0 {
			port("GID[  0]", "%v", p.GID)
		}
		// Port counters (IB names where they exist) where the provider keeps them.
		// A software device's counters live in the process that opened it:
		// these count what this process has done with the device.
		if pcs, err := c.PortCounters(uint8(i + 1)); err == nil {
			for _, pc := range pcs {
				port(pc.Name, "%d", pc.Value)
			}
		}
	}
	return ew.err
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
