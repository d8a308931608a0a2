package xsk

import (
	"encoding/binary"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// The XDP program, written in eBPF assembly through cilium/ebpf's asm
// package (no C compiler). For a socket on IPv4 address A and port P it
// reads, in C:
//
//	eth = data; if eth+14 > end: pass
//	l3, type = eth+14, eth.type
//	if type == 802.1Q: if eth+18 > end: pass; l3, type = eth+18, tag.type
//	if type != IPv4: pass
//	if l3+28 > end: pass
//	if ver/ihl != 0x45 || proto != UDP || (MF|offset) != 0 || daddr != A: pass
//	if udp(l3+20).dport != P: pass
//	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS)
//
// and for an IPv6 address the same with the 40-byte header, next header
// UDP and the 16-byte destination compared as two 64-bit words. So ARP,
// ICMP, TCP, every other UDP port, the other addresses of the interface
// (another device, or the socket path, may own them) and the other IP
// version reach the kernel as if the program were not there, and so do
// IPv4 options, IPv6 extension headers and fragments (rxe sends none). The
// last argument of bpf_redirect_map is the action when the queue has no
// socket in the map (Linux 5.3): pass. Every packet access follows a
// comparison of the furthest byte read with data_end, which is what the
// verifier checks.

// xdp_md offsets.
const (
	mdData    = 0
	mdDataEnd = 4
	mdRxQueue = 16
	xdpPass   = 2
)

// be16 is the value a 16-bit load of the big-endian bytes of v gives on
// this machine: what a packet field is compared with.
func be16(v uint16) int32 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return int32(binary.NativeEndian.Uint16(b[:]))
}

// program returns the instructions for destination addr:port and the
// XSKMAP xsks.
func program(addr netip.Addr, port uint16, xsks *ebpf.Map) asm.Instructions {
	const (
		ctx  = asm.R6
		data = asm.R2
		end  = asm.R3
		tmp  = asm.R4
		v    = asm.R5
		l3   = asm.R7
		want = asm.R8
	)
	addr = addr.Unmap()
	var fragMask [2]byte
	binary.BigEndian.PutUint16(fragMask[:], 0x3fff) // MF and the fragment offset
	insns := asm.Instructions{
		asm.Mov.Reg(ctx, asm.R1),
		asm.LoadMem(data, ctx, mdData, asm.Word),
		asm.LoadMem(end, ctx, mdDataEnd, asm.Word),
		asm.Mov.Reg(tmp, data),
		asm.Add.Imm(tmp, ethLen),
		asm.JGT.Reg(tmp, end, "pass"),
		asm.LoadMem(v, data, 12, asm.Half),
		asm.Mov.Reg(l3, data),
		asm.Add.Imm(l3, ethLen),
		asm.JNE.Imm(v, be16(etherVLAN), "l3"),
		asm.Mov.Reg(tmp, data),
		asm.Add.Imm(tmp, ethLen+vlanLen),
		asm.JGT.Reg(tmp, end, "pass"),
		asm.LoadMem(v, data, 16, asm.Half),
		asm.Mov.Reg(l3, data),
		asm.Add.Imm(l3, ethLen+vlanLen),
	}
	if addr.Is4() {
		a := addr.As4()
		insns = append(insns,
			asm.JNE.Imm(v, be16(etherIPv4), "pass").WithSymbol("l3"),
			asm.Mov.Reg(tmp, l3),
			asm.Add.Imm(tmp, ipv4Len+udpLen),
			asm.JGT.Reg(tmp, end, "pass"),
			asm.LoadMem(v, l3, 0, asm.Byte),
			asm.JNE.Imm(v, 0x45, "pass"),
			asm.LoadMem(v, l3, 9, asm.Byte),
			asm.JNE.Imm(v, protoUDP, "pass"),
			asm.LoadMem(v, l3, 6, asm.Half),
			asm.And.Imm(v, int32(binary.NativeEndian.Uint16(fragMask[:]))),
			asm.JNE.Imm(v, 0, "pass"),
			asm.LoadMem(v, l3, 16, asm.Word),
			asm.Mov.Imm32(want, int32(binary.NativeEndian.Uint32(a[:]))),
			asm.JNE.Reg(v, want, "pass"),
			asm.LoadMem(v, l3, ipv4Len+2, asm.Half),
			asm.JNE.Imm(v, be16(port), "pass"),
		)
	} else {
		a := addr.As16()
		insns = append(insns,
			asm.JNE.Imm(v, be16(etherIPv6), "pass").WithSymbol("l3"),
			asm.Mov.Reg(tmp, l3),
			asm.Add.Imm(tmp, ipv6Len+udpLen),
			asm.JGT.Reg(tmp, end, "pass"),
			asm.LoadMem(v, l3, 6, asm.Byte),
			asm.JNE.Imm(v, protoUDP, "pass"),
			asm.LoadMem(v, l3, 24, asm.DWord),
			asm.LoadImm(want, int64(binary.NativeEndian.Uint64(a[0:8])), asm.DWord),
			asm.JNE.Reg(v, want, "pass"),
			asm.LoadMem(v, l3, 32, asm.DWord),
			asm.LoadImm(want, int64(binary.NativeEndian.Uint64(a[8:16])), asm.DWord),
			asm.JNE.Reg(v, want, "pass"),
			asm.LoadMem(v, l3, ipv6Len+2, asm.Half),
			asm.JNE.Imm(v, be16(port), "pass"),
		)
	}
	return append(insns,
		asm.LoadMapPtr(asm.R1, xsks.FD()),
		asm.LoadMem(asm.R2, ctx, mdRxQueue, asm.Word),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.Return(),

		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return(),
	)
}

// loadProgram loads the program, declared able to handle multi-buffer
// frames (BPF_F_XDP_HAS_FRAGS) if frags: it reads only the first buffer's
// headers, which is all such a program must promise.
func loadProgram(addr netip.Addr, port uint16, xsks *ebpf.Map, frags bool) (*ebpf.Program, error) {
	spec := &ebpf.ProgramSpec{
		Name:         "ibex_xsk",
		Type:         ebpf.XDP,
		License:      "Dual MIT/GPL",
		Instructions: program(addr, port, xsks),
	}
	if frags {
		spec.Flags = unix.BPF_F_XDP_HAS_FRAGS
	}
	return ebpf.NewProgram(spec)
}
