package wire_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/internal/pcap"
	"github.com/ibex-rdma/ibex/wire"
)

// TestTshark writes one frame per opcode this package encodes — every RC
// opcode, plus UC and UD — over Ethernet/IPv4 and Ethernet/IPv6 (one of them
// 802.1Q-tagged) into a pcap, has tshark (an independent dissector) decode
// it, and compares every header field tshark reports with what was encoded.
// It also checks that Opcode.String matches tshark's opcode names. tshark
// does not verify the ICRC; it shows it as the 4 wire bytes read big-endian.
func TestTshark(t *testing.T) {
	bin, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark binary not found in PATH (apt-get install tshark); skipping the tshark cross-check")
	}
	checkOpcodeNames(t, bin)

	rng := rand.New(rand.NewPCG(1, 2))
	var frames []wire.Frame
	var raw [][]byte
	for _, v6 := range []bool{false, true} {
		for op := range 256 {
			o := ib.Opcode(op)
			if !o.Valid() || o == ib.CNP { // tshark 4.0 does not dissect a CNP's headers
				continue
			}
			f := wire.Frame{
				EthDst: [6]byte{2, 0, 0, 0, 0, 2}, EthSrc: [6]byte{2, 0, 0, 0, 0, 1},
				Encap:  randomEncap(rng, v6),
				Packet: randomPacket(rng, o, 200),
			}
			f.Tagged = op == int(ib.RCSendOnly)
			f.VLAN = 0x2064
			f.Encap.TTL = 64 // tshark warns about small TTLs
			b, err := wire.AppendFrame(nil, &f)
			if err != nil {
				t.Fatal(err)
			}
			if v6 { // tshark flags UDP checksum 0 over IPv6 (rxe sends it anyway)
				f.Encap.UDPChecksum = udpChecksumOfFrame(b)
				if b, err = wire.AppendFrame(nil, &f); err != nil {
					t.Fatal(err)
				}
			}
			frames = append(frames, f)
			raw = append(raw, b)
		}
	}
	file := &pcap.File{LinkType: pcap.LinkEthernet}
	for i, b := range raw {
		file.Records = append(file.Records, pcap.Record{Sec: uint32(i), Data: b})
	}
	name := filepath.Join(t.TempDir(), "ibex.pcap")
	if err := pcap.WriteFile(name, file); err != nil {
		t.Fatal(err)
	}

	fields := []string{
		"frame.number", "infiniband.bth.opcode", "infiniband.bth.se", "infiniband.bth.m",
		"infiniband.bth.padcnt", "infiniband.bth.tver", "infiniband.bth.p_key", "infiniband.bth.destqp",
		"infiniband.bth.a", "infiniband.bth.psn",
		"infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
		"infiniband.aeth.syndrome", "infiniband.aeth.msn",
		"infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt", "infiniband.atomicacketh.origremdt",
		"infiniband.immdt", "infiniband.ieth", "infiniband.deth.q_key", "infiniband.deth.srcqp",
		"infiniband.invariant.crc", "udp.srcport", "udp.dstport", "vlan.id",
		"_ws.expert.message", "_ws.malformed",
	}
	args := []string{"-r", name, "--disable-protocol", "rpcordma", "-T", "fields", "-E", "separator=/t", "-E", "occurrence=f"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		t.Fatalf("tshark %s: %v", strings.Join(args, " "), err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(frames) {
		t.Fatalf("tshark printed %d lines for %d frames:\n%s", len(lines), len(frames), out)
	}
	for i, line := range lines {
		got := map[string]string{}
		for j, v := range strings.Split(line, "\t") {
			if j < len(fields) {
				got[fields[j]] = v
			}
		}
		checkTsharkFields(t, i+1, &frames[i], got)
	}
}

// checkTsharkFields compares tshark's fields for frame n with f.
func checkTsharkFields(t *testing.T, n int, f *wire.Frame, got map[string]string) {
	t.Helper()
	p := &f.Packet
	h := &p.BTH
	m := h.Opcode.Mask()
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	dec := func(v uint64) string { return strconv.FormatUint(v, 10) }
	hexb := func(v uint32) string { return fmt.Sprintf("%08x", v) }
	want := map[string]string{
		"frame.number":          dec(uint64(n)),
		"infiniband.bth.opcode": dec(uint64(h.Opcode)),
		"infiniband.bth.se":     b(h.SE), "infiniband.bth.m": b(h.MigReq),
		"infiniband.bth.padcnt": dec(uint64(h.PadCnt)), "infiniband.bth.tver": "0",
		"infiniband.bth.p_key":  dec(uint64(h.PKey)),
		"infiniband.bth.destqp": fmt.Sprintf("0x%06x", h.DestQP),
		"infiniband.bth.a":      b(h.AckReq), "infiniband.bth.psn": dec(uint64(h.PSN)),
		"infiniband.invariant.crc": fmt.Sprintf("0x%08x", bswap(p.ICRC)),
		"udp.srcport":              dec(uint64(f.Encap.Src.Port())),
		"udp.dstport":              "4791",
		"_ws.expert.message":       "",
		"_ws.malformed":            "",
	}
	if f.Tagged {
		want["vlan.id"] = dec(uint64(f.VLAN & 0xfff))
	}
	if m&(ib.MaskRETH|ib.MaskAtomicETH) != 0 { // tshark shows the AtomicETH address as reth.*
		va, rkey := p.RETH.VA, p.RETH.RKey
		if m&ib.MaskAtomicETH != 0 {
			va, rkey = p.AtomicETH.VA, p.AtomicETH.RKey
		}
		want["infiniband.reth.va"] = dec(va)
		want["infiniband.reth.r_key"] = fmt.Sprintf("0x%08x", rkey)
	}
	if m&ib.MaskRETH != 0 {
		want["infiniband.reth.dmalen"] = dec(uint64(p.RETH.DMALen))
	}
	if m&ib.MaskAETH != 0 {
		want["infiniband.aeth.syndrome"] = dec(uint64(p.AETH.Syndrome))
		want["infiniband.aeth.msn"] = dec(uint64(p.AETH.MSN))
	}
	if m&ib.MaskAtomicETH != 0 {
		want["infiniband.atomiceth.swapdt"] = dec(p.AtomicETH.SwapAdd)
		want["infiniband.atomiceth.cmpdt"] = dec(p.AtomicETH.Compare)
	}
	if m&ib.MaskAtomicAckETH != 0 {
		want["infiniband.atomicacketh.origremdt"] = dec(p.AtomicAck)
	}
	if m&ib.MaskImmDt != 0 {
		want["infiniband.immdt"] = hexb(p.Imm)
	}
	if m&ib.MaskIETH != 0 {
		want["infiniband.ieth"] = hexb(p.InvalidateRKey)
	}
	if m&ib.MaskDETH != 0 {
		want["infiniband.deth.q_key"] = fmt.Sprintf("0x%08x", p.DETH.QKey)
		want["infiniband.deth.srcqp"] = fmt.Sprintf("0x%06x", p.DETH.SrcQP)
	}
	for k, w := range want {
		if g := got[k]; !tsharkEqual(g, w) {
			t.Errorf("frame %d (%v, %v): tshark %s = %q, want %q", n, h.Opcode, f.Encap.Src.Addr(), k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok && g != "" {
			t.Errorf("frame %d (%v): tshark shows %s = %q, which %v does not carry", n, h.Opcode, k, g, h.Opcode)
		}
	}
}

// tsharkEqual compares a tshark field with the expected text, accepting
// tshark's spellings of booleans and hex numbers.
func tsharkEqual(got, want string) bool {
	if got == want {
		return true
	}
	switch want {
	case "1":
		return got == "True" || got == "true"
	case "0":
		return got == "False" || got == "false"
	}
	a, err1 := strconv.ParseUint(strings.TrimPrefix(got, "0x"), hexOrDec(got), 64)
	b, err2 := strconv.ParseUint(strings.TrimPrefix(want, "0x"), hexOrDec(want), 64)
	return err1 == nil && err2 == nil && a == b
}

func hexOrDec(s string) int {
	if strings.HasPrefix(s, "0x") {
		return 16
	}
	return 10
}

func bswap(v uint32) uint32 {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return binary.BigEndian.Uint32(b[:])
}

// checkOpcodeNames compares Opcode.String with tshark's opcode value strings,
// "Reliable Connection (RC) - SEND First" for "RC SEND First".
func checkOpcodeNames(t *testing.T, bin string) {
	out, err := exec.Command(bin, "-G", "values").Output()
	if err != nil {
		t.Fatalf("tshark -G values: %v", err)
	}
	names := map[int]string{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Split(l, "\t")
		if len(f) == 4 && f[0] == "V" && f[1] == "infiniband.bth.opcode" {
			v, _ := strconv.Atoi(f[2])
			names[v] = f[3]
		}
	}
	for op := range 256 {
		o := ib.Opcode(op)
		if !o.Valid() || o == ib.CNP { // tshark 4.0 has no name for 0x81
			continue
		}
		tr := o.Transport().String()
		want := strings.TrimPrefix(o.String(), tr+" ")
		long := names[op]
		i := strings.Index(long, " - ")
		if i < 0 || !strings.Contains(long[:i], "("+tr+")") || long[i+3:] != want {
			t.Errorf("opcode %#02x: String %q, tshark %q", op, o.String(), long)
		}
	}
}

// udpChecksumOfFrame computes the UDP checksum of an encoded untagged or
// tagged Ethernet frame.
func udpChecksumOfFrame(b []byte) uint16 {
	if binary.BigEndian.Uint16(b[12:]) == 0x8100 {
		b = append(append([]byte{}, b[:12]...), b[16:]...)
	}
	return udpChecksumOf(b)
}
