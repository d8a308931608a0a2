// Package attack is ibex's attack suite (issue 21, part 5): ReDMArk's
// attacks on RoCE, carried out against victim processes as an attacker on
// the same network would, each measured, so that the suite reports which
// succeed today and which stop succeeding as defences land.
//
// The attacker is the process that calls Run. It learns live QPNs, PSNs,
// rkeys and virtual addresses only by sniffing (Sniffer: AF_PACKET on lo,
// decoded with package wire), and forges RoCEv2 packets with correct ICRCs
// from an address of its own (UDPForger) or with the real peer's address
// and port spoofed (RawForger: a raw IPv4 socket with IP_HDRINCL), or
// replays captured packets byte for byte. The victims are separate
// processes (VictimMain, started through Config.Victim) on 127.0.0.110-119:
// a pair of QPs on two udp devices with a stream of checked WRITEs, or a
// server that accepts client QPs and holds a secret MR. They report what
// judging an attack needs (memory checks, QP states, completion statuses),
// never their keys.
//
// Each case names the ReDMArk weakness (V1-V10) and attack (A1-A6) it maps
// to, what success means, and the result expected without and with
// encryption; the case table in cases.go is the single source of truth for
// the expectations, and Report.Mismatches counts the cases whose measured
// result differs. Run needs CAP_NET_RAW (ErrNoCapability otherwise).
package attack
