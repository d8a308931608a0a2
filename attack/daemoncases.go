package attack

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ibex-rdma/ibex/ib"
)

// The daemon cases' tenants, told apart by the primary group of their
// processes (which stay root, so that they can run the suite's binary
// wherever it is): red is the attacker's, green the victim's. A process of
// neither group matches no tenant and is refused.
const (
	gidRed   = 61021
	gidGreen = 61022
	// maxClients is the daemon's limit on attached processes,
	// tenantClients each tenant's quota of them.
	maxClients    = 8
	tenantClients = 3
)

// daemonConfig is ibexd's configuration for the daemon cases: small
// per-process limits, and tenant quotas for red and green, each quota set
// as a careful operator would (the suite measures what the defences
// achieve when they are used).
func daemonConfig(sock, psp string) string {
	return fmt.Sprintf(`socket: %s
devices:
  - name: udp0
    address: %s
    xdp: "off"
%slimits:
  max_clients: %d
  max_qps: 16
  max_cqs: 8
  max_mrs: 64
  max_memory: 16M
tenants:
  - name: red
    match:
      gids: [%d]
    quotas: {max_clients: %d, max_qps: 24, max_cqs: 12, max_mrs: 96, max_memory: 24M}
  - name: green
    match:
      gids: [%d]
    quotas: {max_clients: %d, max_qps: 24, max_cqs: 12, max_mrs: 96, max_memory: 24M}
`, sock, AddrDaemon, psp, maxClients, gidRed, tenantClients, gidGreen, tenantClients)
}

// daemonEnv is what a process attaching to the suite's daemon needs.
func (s *Suite) daemonEnv() []string {
	return []string{"IBEX_DAEMON=on", "IBEX_DAEMON_SOCKET=" + filepath.Join(s.dir, "ibexd.sock")}
}

// startDaemon starts ibexd as a process of its own.
func (s *Suite) startDaemon() (*proc, error) {
	sock := filepath.Join(s.dir, "ibexd.sock")
	_ = os.Remove(sock)
	conf := filepath.Join(s.dir, "ibexd.yaml")
	psp := ""
	if s.key != "" {
		psp = fmt.Sprintf("    psp: required\n    psp_key: %s\n", s.key)
	}
	if err := os.WriteFile(conf, []byte(daemonConfig(sock, psp)), 0o644); err != nil {
		return nil, err
	}
	return s.startVictim(nil, "--mode", "daemon", "--config", conf)
}

const daemonDev = "ibexd/udp0"

// rkeyTenant: a server of the green tenant on the daemon, client QP and
// secret MR in one PD; the red attacker learns the keys its own tenant is
// given by the same daemon and tries those, their neighbours, its grant's
// and random ones.
func (s *Suite) rkeyTenant() (Outcome, string) {
	d, err := s.startDaemon()
	if err != nil {
		return failed("daemon", err)
	}
	defer d.stop()
	k, err := s.startAs(gidRed, s.daemonEnv(), "--mode", "keys", "--device", daemonDev)
	if err != nil {
		return failed("the attacker's own keys", err)
	}
	own, err := k.stop()
	if err != nil {
		return failed("the attacker's own keys", err)
	}
	v, err := s.startAs(gidGreen, s.daemonEnv(), "--mode", "server", "--pd", "same", "--device", daemonDev)
	if err != nil {
		return failed("victim", err)
	}
	defer v.stop()
	return s.rkeyGuess(v, AddrDaemon, AddrDaemon, own.Keys, false)
}

// tenantMemory: a pair of the green tenant on the daemon; the red attacker
// sniffs its WRITEs, and a process of its own on the same daemon connects a
// QP to the victim's responder and WRITEs with the sniffed rkey and address
// at the PSN it expects: the daemon sends it from the victim's own address.
func (s *Suite) tenantMemory(intruderGID uint32, remote bool) (Outcome, string) {
	d, err := s.startDaemon()
	if err != nil {
		return failed("daemon", err)
	}
	defer d.stop()
	args := []string{"--mode", "pair", "--device", daemonDev}
	dst := AddrDaemon
	if remote {
		args = append(args, "--b-local", "--b", AddrB.String())
		dst = AddrB
	}
	v, err := s.startAs(gidGreen, s.daemonEnv(), args...)
	if err != nil {
		return failed("victim", err)
	}
	defer v.stop()
	same := from(AddrDaemon, dst)
	if _, _, ok := s.sn.Wait(v.mark, 3*time.Second, func(x *Seen) bool { return same(x) && isWrite(x) }); !ok {
		return Blocked, "no WRITE seen from the victim"
	}
	pst, err := v.ask(command{Cmd: "pause"})
	if err != nil {
		return failed("pause", err)
	}
	w, ok := s.lastRequest(v, pst.Posted, same)
	if !ok || !isWrite(&w) {
		return Blocked, "the victim's last request is not a WRITE"
	}
	rkey, va := w.Packet.RETH.RKey, w.Packet.RETH.VA
	var spi uint32
	if !w.Decoded {
		if !remote {
			return Blocked, fmt.Sprintf("sniffed WRITE not readable (secured: %v): no rkey or address learnt", secured(&w))
		}
		// Sealed: the SPI is in the clear; the rkey and address are not.
		// Go on with the SPI, as an attacker who learnt the rest elsewhere.
		spi = spiOf(&w)
	}
	iargs := []string{"--mode", "intruder", "--device", daemonDev,
		"--qpn", fmt.Sprint(w.BTH.DestQP), "--psn", fmt.Sprint(ib.PSNAdd(w.BTH.PSN, 1)),
		"--rkey", fmt.Sprint(rkey), "--va", fmt.Sprint(va), "--spi", fmt.Sprint(spi)}
	if remote {
		iargs = append(iargs, "--peer", AddrB.String())
	}
	in, err := s.startAs(intruderGID, s.daemonEnv(), iargs...)
	if err != nil {
		return failed("intruder", err)
	}
	ist, err := in.stop()
	if err != nil {
		return failed("intruder", err)
	}
	if _, err := v.ask(command{Cmd: "resume"}); err != nil {
		return failed("resume", err)
	}
	st, err := waitWrites(v, 2*slots)
	if err != nil {
		return failed("status", err)
	}
	o, dmg := damage(st)
	got := "WRITE completed " + ist.Hole
	if ist.LastErr != "" {
		got = ist.LastErr
	}
	if ist.Hole == "SUCCESS" {
		o = Succeeded
	}
	if spi != 0 {
		got += fmt.Sprintf(" (sealed: announced the sniffed SPI %#x; the rkey and address were unreadable)", spi)
	}
	return o, fmt.Sprintf("intruder: %s; %s", got, dmg)
}

// exhaustion has the red tenant take all it can of the daemon (two hog
// processes taking CQs, QPs, MRs and memory until refused), then a green
// process creates one of each. It returns what green could not create.
func (s *Suite) exhaustion(probeGID uint32) (failedKinds []string, detail string, err error) {
	d, err := s.startDaemon()
	if err != nil {
		return nil, "", err
	}
	defer d.stop()
	var hogs []*proc
	defer func() {
		for _, h := range hogs {
			_, _ = h.stop()
		}
	}()
	var took []string
	for range 2 {
		h, err := s.startAs(gidRed, s.daemonEnv(), "--mode", "hog", "--device", daemonDev)
		if err != nil {
			return nil, "", fmt.Errorf("hog: %w", err)
		}
		hogs = append(hogs, h)
		st, err := h.ask(command{Cmd: "status"})
		if err != nil {
			return nil, "", err
		}
		took = append(took, st.LastErr)
	}
	p, err := s.startAs(probeGID, s.daemonEnv(), "--mode", "probe", "--device", daemonDev)
	if err != nil {
		return nil, "", fmt.Errorf("probe: %w", err)
	}
	st, err := p.stop()
	if err != nil {
		return nil, "", err
	}
	detail = "red's two processes took: " + strings.Join(took, " | ")
	if st.LastErr != "" {
		detail += "; the probe: " + st.LastErr
	}
	return st.Failed, detail, nil
}

// exhaust returns the case for one resource, the probe a process of the
// tenant gid; the cases of one probe tenant share one run.
func exhaust(kind string, gid uint32) func(*Suite) (Outcome, string) {
	who := map[uint32]string{gidRed: "red", gidGreen: "green"}[gid]
	return func(s *Suite) (Outcome, string) {
		if s.exhausted[gid] == nil {
			f, d, err := s.exhaustion(gid)
			if err != nil {
				return failed("exhaustion", err)
			}
			if s.exhausted == nil {
				s.exhausted = map[uint32]*exhaustRun{}
			}
			s.exhausted[gid] = &exhaustRun{failed: f, detail: d}
		}
		e := s.exhausted[gid]
		if slices.Contains(e.failed, kind) || slices.Contains(e.failed, "attach") {
			return Succeeded, fmt.Sprintf("%s could not create a %s; %s", who, kind, e.detail)
		}
		return Blocked, fmt.Sprintf("%s created its %s; %s", who, kind, e.detail)
	}
}

type exhaustRun struct {
	failed []string
	detail string
}

// exhaustClients: the red tenant attaches as many processes as the daemon
// takes; then a process of the tenant probeGID attaches.
func (s *Suite) exhaustClients(probeGID uint32) (Outcome, string) {
	d, err := s.startDaemon()
	if err != nil {
		return failed("daemon", err)
	}
	defer d.stop()
	var hogs []*proc
	defer func() {
		for _, h := range hogs {
			_, _ = h.stop()
		}
	}()
	refused := ""
	for range maxClients {
		h, err := s.startAs(gidRed, s.daemonEnv(), "--mode", "hog", "--attach-only", "--device", daemonDev)
		if err != nil {
			refused = firstLine(err.Error())
			break
		}
		hogs = append(hogs, h)
	}
	who := map[uint32]string{gidRed: "red", gidGreen: "green"}[probeGID]
	p, err := s.startAs(probeGID, s.daemonEnv(), "--mode", "probe", "--device", daemonDev)
	if err != nil {
		return failed("probe", err)
	}
	st, err := p.stop()
	if err != nil {
		return failed("probe", err)
	}
	d0 := fmt.Sprintf("red attached %d processes (daemon max_clients %d, tenant quota %d)", len(hogs), maxClients, tenantClients)
	if refused != "" {
		d0 += ", then was refused: " + refused
	}
	if slices.Contains(st.Failed, "attach") {
		return Succeeded, d0 + "; " + who + " could not attach: " + st.LastErr
	}
	return Blocked, d0 + "; " + who + " attached"
}

// partitionsConf makes both pair addresses limited members of one
// partition (P_Key index 1 of their tables), beside the default one;
// partitionsFull makes the requester a full member (the control).
const (
	partitionsConf = "Default=0x7fff : ALL=full;\natpart=0x8021 : ALL=limited;\n"
	partitionsFull = "Default=0x7fff : ALL=full;\natpart=0x8021 : 127.0.0.110=full, ALL=limited;\n"
)

// partition: two limited members of one partition try to exchange data (a
// pair whose QPs use the partition's pkey_index).
func (s *Suite) partition(text string) (Outcome, string) {
	conf := filepath.Join(s.dir, "partitions.conf")
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return failed("partitions.conf", err)
	}
	v, err := s.startVictim([]string{"IBEX_UDP_PARTITIONS=" + conf}, "--mode", "pair", "--pkey-index", "1")
	if err != nil {
		if strings.Contains(err.Error(), "pkey") || strings.Contains(err.Error(), "P_Key") {
			return NA, "partitions not available to the victim: " + firstLine(err.Error())
		}
		return failed("victim", err)
	}
	defer v.stop()
	var st Status
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if st, err = v.ask(command{Cmd: "status"}); err != nil {
			return failed("status", err)
		}
		if st.Writes > 0 || st.Errors > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	pair := "limited-limited"
	if text != partitionsConf {
		pair = "full-limited"
	}
	d := fmt.Sprintf("%s pair: %d WRITEs landed, %d failed (%s)", pair, st.Writes, st.Errors, st.LastErr)
	if st.Writes > 0 {
		return Succeeded, d
	}
	return Blocked, d
}

// spiOf is the SPI of a sealed packet: bytes 12-15 of the IB packet,
// after the BTH (package psp's layout).
func spiOf(x *Seen) uint32 {
	ihl := int(x.IP[0]&0xf) * 4
	b := x.IP[ihl+8+12:]
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
