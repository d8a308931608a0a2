package attack

import (
	"fmt"
	"strings"
)

// caseDef is one attack: what it maps to in ReDMArk, what success means,
// and the result expected in each mode. The table below is the single
// source of truth for the expectations; the results are measured.
type caseDef struct {
	Name    string
	Ref     string // ReDMArk weakness (V) and attack (A)
	Success string
	Plain   Outcome // expected without encryption
	Enc     Outcome // expected with IBEX_PSP=required
	run     func(*Suite) (Outcome, string)
}

func (c *caseDef) expect(m Mode) Outcome {
	if m == Encrypted {
		return c.Enc
	}
	return c.Plain
}

// Cases lists the cases' names in the order the suite runs them.
func Cases() []string {
	var names []string
	for _, c := range table {
		names = append(names, c.Name)
	}
	return names
}

// table: the cases and their expectations.
var table = []caseDef{
	{Name: "rkey-pd", Ref: "V9/A3",
		Success: "a client QP in one PD has a WRITE with a sniffed or guessed rkey of another PD's MR (same process) accepted",
		Plain:   Blocked, Enc: Blocked, run: (*Suite).rkeyPD},
	{Name: "rkey-process", Ref: "V1-V3/A3",
		Success: "a WRITE with an rkey derived from the attacker's own keys or its grant (neighbours, low-byte variants, random) is accepted by another process",
		Plain:   Blocked, Enc: Blocked, run: (*Suite).rkeyProcess},
	{Name: "rkey-tenant", Ref: "V1-V3/A3",
		Success: "a WRITE with an rkey derived from keys the daemon gave the attacker's tenant (or from its grant, or random) is accepted by another tenant's QP on the same daemon",
		Plain:   Blocked, Enc: Blocked, run: (*Suite).rkeyTenant},
	{Name: "inject-nonpeer", Ref: "V8/A1",
		Success: "a WRITE forged from a non-peer address with a sniffed rkey, address and the expected PSN changes victim memory or makes a legitimate WRITE silently lose bytes",
		Plain:   Blocked, Enc: Blocked, run: func(s *Suite) (Outcome, string) { return s.inject(fromOwn) }},
	{Name: "inject-samehost", Ref: "V8/A1",
		Success: "the same WRITE from another process on the peer's host: its address, another UDP port, no privilege",
		Plain:   Succeeded, Enc: Blocked, run: func(s *Suite) (Outcome, string) { return s.inject(fromSameHost) }},
	{Name: "inject-spoofed", Ref: "V8/A1",
		Success: "the same WRITE with the real peer's address and port spoofed",
		Plain:   Succeeded, Enc: Blocked, run: func(s *Suite) (Outcome, string) { return s.inject(fromSpoofed) }},
	{Name: "nak-nonpeer", Ref: "V8/A2",
		Success: "forged NAKs from a non-peer address move the live requester's QP to ERR",
		Plain:   Blocked, Enc: Blocked, run: func(s *Suite) (Outcome, string) { return s.nak(fromOwn) }},
	{Name: "nak-samehost", Ref: "V8/A2",
		Success: "forged NAKs from another process on the peer's host (its address, another port) move the requester's QP to ERR",
		Plain:   Succeeded, Enc: Blocked, run: func(s *Suite) (Outcome, string) { return s.nak(fromSameHost) }},
	{Name: "nak-spoofed", Ref: "V8/A2",
		Success: "forged NAKs with the peer's address spoofed move the live requester's QP to ERR",
		Plain:   Succeeded, Enc: Blocked, run: func(s *Suite) (Outcome, string) { return s.nak(fromSpoofed) }},
	{Name: "ack-nonpeer", Ref: "V8/A1",
		Success: "a forged ACK from a non-peer address completes with success a WRITE the real peer never acknowledged",
		Plain:   Blocked, Enc: Blocked, run: func(s *Suite) (Outcome, string) { return s.ack(fromOwn, 0) }},
	{Name: "ack-samehost", Ref: "V8/A1",
		Success: "the same forged ACK from another process on the peer's host (its address, another port)",
		Plain:   Succeeded, Enc: Blocked, run: func(s *Suite) (Outcome, string) { return s.ack(fromSameHost, 0) }},
	{Name: "ack-spoofed", Ref: "V8/A1",
		Success: "the same forged ACK with the peer's address spoofed",
		Plain:   Succeeded, Enc: Blocked, run: func(s *Suite) (Outcome, string) { return s.ack(fromSpoofed, 0) }},
	{Name: "ack-outofwindow", Ref: "V6/A1",
		Success: "a spoofed ACK for a PSN far ahead of (or behind) what was sent completes that WRITE",
		Plain:   Blocked, Enc: Blocked, run: func(s *Suite) (Outcome, string) { return s.ack(fromSpoofed, 1000) }},
	{Name: "replay", Ref: "V8/A1",
		Success: "captured legitimate WRITEs resent byte for byte execute again (a slot reverts to older data)",
		Plain:   Blocked, Enc: Blocked, run: func(s *Suite) (Outcome, string) { return s.replay(false) }},
	{Name: "replay-reconnect", Ref: "V5-V6/A1",
		Success: "WRITEs captured before the victim reconnected its QPs (same MRs, new QPs) execute when resent byte for byte",
		Plain:   Blocked, Enc: Blocked, run: func(s *Suite) (Outcome, string) { return s.replay(true) }},
	{Name: "dereg", Ref: "A3",
		Success: "a spoofed WRITE at the expected PSN with the sniffed rkey of a deregistered MR changes that memory",
		Plain:   Blocked, Enc: Blocked, run: func(s *Suite) (Outcome, string) { return s.dereg("dereg") }},
	{Name: "partition-limited", Ref: "V9/A3",
		Success: "two limited members of one partition (opensm partitions.conf) exchange data",
		Plain:   Blocked, Enc: Blocked, run: func(s *Suite) (Outcome, string) { return s.partition(partitionsConf) }},
	{Name: "exhaust-qp", Ref: "A4",
		Success: "after one tenant took all the QPs the daemon gives it, another tenant's create_qp fails",
		Plain:   Blocked, Enc: Blocked, run: exhaust("qp", gidGreen)},
	{Name: "exhaust-cq", Ref: "A5",
		Success: "the same with CQs",
		Plain:   Blocked, Enc: Blocked, run: exhaust("cq", gidGreen)},
	{Name: "exhaust-mr", Ref: "A5",
		Success: "the same with MRs",
		Plain:   Blocked, Enc: Blocked, run: exhaust("mr", gidGreen)},
	{Name: "exhaust-mem", Ref: "A5",
		Success: "the same with registered memory (1 MiB MRs)",
		Plain:   Blocked, Enc: Blocked, run: exhaust("memory", gidGreen)},
	{Name: "exhaust-clients", Ref: "A4/A5",
		Success: "after one tenant attached as many processes as the daemon takes, another tenant's process cannot attach",
		Plain:   Blocked, Enc: Blocked, run: func(s *Suite) (Outcome, string) { return s.exhaustClients(gidGreen) }},
	{Name: "tenant-memory", Ref: "V9/A3",
		Success: "a process of another tenant on the same daemon connects a QP to the victim's QP (sniffed QPN and PSN) and WRITEs its memory with the sniffed rkey",
		Plain:   Blocked, Enc: Blocked, run: func(s *Suite) (Outcome, string) { return s.tenantMemory(gidRed, false) }},
	{Name: "tenant-remote", Ref: "V8-V9/A3",
		Success: "the same when the victim's responder is on another host: the red process's daemon QP connects to it and WRITEs with the sniffed rkey, from the address the victim's requester uses",
		Plain:   Succeeded, Enc: Blocked, run: func(s *Suite) (Outcome, string) { return s.tenantMemory(gidRed, true) }},
}

// controls: the attacks of the table against a target without the defence
// that blocks them. Each must succeed: a control that does not shows the
// suite's detector blind, and its "blocked" worthless. They run in plain
// mode.
var controls = []caseDef{
	{Name: "control-rkey", Ref: "rkey-pd",
		Success: "the sniffed rkey of an MR in the client QP's own PD is accepted",
		Plain:   Succeeded, Enc: Succeeded, run: func(s *Suite) (Outcome, string) {
			v, err := s.startVictim(nil, "--mode", "server", "--pd", "same", "--a", AddrWriter.String(), "--b", AddrServer.String())
			if err != nil {
				return failed("victim", err)
			}
			defer v.stop()
			return s.rkeyGuess(v, AddrWriter, AddrServer, nil, true)
		}},
	{Name: "control-dereg", Ref: "dereg",
		Success: "the spoofed WRITE changes the MR when it stays registered",
		Plain:   Succeeded, Enc: Succeeded, run: func(s *Suite) (Outcome, string) { return s.dereg("keep") }},
	{Name: "control-partition", Ref: "partition-limited",
		Success: "a full and a limited member of the partition exchange data",
		Plain:   Succeeded, Enc: Succeeded, run: func(s *Suite) (Outcome, string) { return s.partition(partitionsFull) }},
	{Name: "control-exhaust", Ref: "exhaust-qp",
		Success: "the tenant that took all its quota cannot create another QP",
		Plain:   Succeeded, Enc: Succeeded, run: exhaust("qp", gidRed)},
	{Name: "control-clients", Ref: "exhaust-clients",
		Success: "red's own process after red attached all its quota cannot attach",
		Plain:   Succeeded, Enc: Succeeded, run: func(s *Suite) (Outcome, string) { return s.exhaustClients(gidRed) }},
	{Name: "control-tenant", Ref: "tenant-memory",
		Success: "a process of the victim's own tenant reaches its memory that way",
		Plain:   Succeeded, Enc: Succeeded, run: func(s *Suite) (Outcome, string) { return s.tenantMemory(gidGreen, false) }},
}

// Controls lists the controls' names.
func Controls() []string {
	var names []string
	for _, c := range controls {
		names = append(names, c.Name)
	}
	return names
}

func selectCases(names []string, ctl bool) ([]*caseDef, error) {
	table := table
	if ctl {
		table = controls
	}
	if len(names) == 0 {
		out := make([]*caseDef, len(table))
		for i := range table {
			out[i] = &table[i]
		}
		return out, nil
	}
	var out []*caseDef
	for _, n := range names {
		found := false
		for i := range table {
			c := &table[i]
			if c.Name == n || (strings.HasSuffix(n, "-") && strings.HasPrefix(c.Name, n)) {
				out = append(out, c)
				found = true
			}
		}
		if !found {
			all := Cases()
			if ctl {
				all = Controls()
			}
			return nil, fmt.Errorf("attack: no case %q (cases: %s)", n, strings.Join(all, ", "))
		}
	}
	return out, nil
}
