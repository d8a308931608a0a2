package daemon_test

import (
	"bufio"
	"fmt"
	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/internal/hwq"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/provider/ibexd"
	"github.com/ibex-rdma/ibex/verbs"
)

// tenantChild is the "tenant" application role: a process of some uid
// that opens ibexd/udp0 (printing "open ERR" and exiting if the daemon
// refuses it, else "ok") and then runs the parent's commands from stdin,
// one answer line each, with "nil" for no error:
//
//	qps N          create up to N QPs -> "qps K ERR" (K made, ERR the first failure)
//	mrs N SIZE     register up to N MRs of SIZE bytes -> "mrs K ERR"
//	init I         move a fresh QP to INIT with pkey_index I -> "init ERR"
//	steal INFO     with INFO another process's end (end.info): connect a
//	               fresh QP to its QP -> "connect ERR"; then WRITE with its
//	               address and rkey through a pair of this process's own
//	               QPs -> "write STATUS"
//
// It exits when stdin closes.
func tenantChild() int {
	ctx, err := verbs.Open("ibexd/udp0")
	if err != nil {
		fmt.Println("open", oneLine(err))
		return 0
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		fmt.Println("pd", oneLine(err))
		return 1
	}
	cq, err := ctx.CreateCQ(64)
	if err != nil {
		fmt.Println("cq", oneLine(err))
		return 1
	}
	fmt.Println("ok")
	in := bufio.NewScanner(os.Stdin)
	var keep []any // what the commands made stays until the process exits
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		arg := func(i int) int {
			if i >= len(f) {
				return 0
			}
			n, _ := strconv.Atoi(f[i])
			return n
		}
		switch f[0] {
		case "qps":
			k, err := 0, error(nil)
			for ; k < arg(1); k++ {
				var qp *verbs.QP
				if qp, err = pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq}); err != nil {
					break
				}
				keep = append(keep, qp)
			}
			fmt.Println("qps", k, oneLine(err))
		case "mrs":
			k, err := 0, error(nil)
			for ; k < arg(1); k++ {
				var mr *verbs.MR
				if mr, err = pd.AllocMR(arg(2), allAccess); err != nil {
					break
				}
				keep = append(keep, mr)
			}
			fmt.Println("mrs", k, oneLine(err))
		case "init":
			qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq})
			if err == nil {
				keep = append(keep, qp)
				err = qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, PKeyIndex: uint16(arg(1))},
					verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags)
			}
			fmt.Println("init", oneLine(err))
		case "steal":
			fmt.Println(steal(pd, cq, strings.TrimPrefix(in.Text(), "steal ")))
		default:
			fmt.Println("unknown command", f[0])
		}
	}
	_ = keep
	return 0
}

// steal tries another process's QP number and rkey from this one.
func steal(pd *verbs.PD, cq *verbs.CQ, info string) string {
	p, err := parseInfo(info)
	if err != nil {
		return "bad info " + oneLine(err)
	}
	mk := func() *verbs.QP {
		qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq})
		if err != nil {
			fmt.Fprintln(os.Stderr, "steal:", err)
			os.Exit(1)
		}
		return qp
	}
	intruder := mk()
	connErr := intruder.Connect(p.ci, quick)
	// Its own pair, then a WRITE with the other's address and rkey: the
	// responder is this process's own QP, whose PD the rkey is not of.
	a, b := mk(), mk()
	if err := a.Connect(b.Info(), verbs.ConnectOptions{}); err != nil {
		return "connect " + oneLine(connErr) + "|own pair: " + oneLine(err)
	}
	if err := b.Connect(a.Info(), verbs.ConnectOptions{}); err != nil {
		return "connect " + oneLine(connErr) + "|own pair: " + oneLine(err)
	}
	mr, err := pd.AllocMR(4096, allAccess)
	if err != nil {
		return "connect " + oneLine(connErr) + "|mr: " + oneLine(err)
	}
	e := &end{qp: a, cq: cq, mr: mr}
	wc := e.write(tbStub{}, p, 0, 0, 64)
	return "connect " + oneLine(connErr) + "|write " + wc.Status.String() + "|cause " + oneLine(a.Err())
}

func oneLine(err error) string {
	if err == nil {
		return "nil"
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}

// tenantProc is a "tenant" child running as uid:gid.
type tenantProc struct {
	*peerProc
}

// userBin is childBin copied where any user may run it (the go tool's
// build directory is its owner's alone).
func userBin(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test runs attached processes under other uids (setuid)")
	}
	dir, err := os.MkdirTemp("", "ibexd-tenant")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(childBin)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "daemon.test")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}

// startTenant starts a tenant child as uid:gid (and supplementary
// groups) and returns it with its first line ("ok" or "open ERR").
func startTenant(t *testing.T, bin string, uid, gid uint32, groups ...uint32) (*tenantProc, string) {
	t.Helper()
	p := &peerProc{cmd: exec.Command(bin, "-test.run=^$"), exit: make(chan error, 1)}
	p.cmd.Dir = "/"
	p.cmd.Env = append(os.Environ(), appEnv+"=tenant")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	p.cmd.Stderr = os.Stderr
	p.stdin, _ = p.cmd.StdinPipe()
	out, _ := p.cmd.StdoutPipe()
	p.out = bufio.NewReader(out)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exit <- p.cmd.Wait() }()
	t.Cleanup(func() { p.close(t) })
	return &tenantProc{p}, p.line(t)
}

// close ends the child (stdin closed) and waits for it; again, it does
// nothing.
func (p *peerProc) close(t *testing.T) {
	if p.closed {
		return
	}
	p.closed = true
	p.stdin.Close()
	select {
	case <-p.exit:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Errorf("child %d did not exit; killed", p.cmd.Process.Pid)
	}
}

// do sends one command and returns the answer line.
func (p *tenantProc) do(t *testing.T, cmd string) string {
	t.Helper()
	if _, err := fmt.Fprintln(p.stdin, cmd); err != nil {
		t.Fatal(err)
	}
	return p.line(t)
}

// expect runs cmd and checks the answer starts with prefix and contains
// each of want.
func (p *tenantProc) expect(t *testing.T, cmd, prefix string, want ...string) {
	t.Helper()
	got := p.do(t, cmd)
	if !strings.HasPrefix(got, prefix) {
		t.Errorf("%s: %q, want it to start with %q", cmd, got, prefix)
		return
	}
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s: %q, want it to contain %q", cmd, got, w)
		}
	}
}

const (
	uidBlue  = 10421
	uidGreen = 10422
	uidOps   = 10423
	uidNone  = 10429
	gidOps   = 10430 // a supplementary group
)

// TestTenantQuotas: processes of two uids, in tenants blue and green, at
// once. Blue's two processes together exhaust blue's QPs, MRs and bytes
// (each failure names the quota, the tenant and the limit, and is
// verbs.ErrLimit's); green, attached meanwhile, still makes all it is
// allowed, and fails at its own quotas only. A process of a uid no tenant
// takes is refused at attach. The status shows who each process is.
func TestTenantQuotas(t *testing.T) {
	bin := userBin(t)
	// The port's P_Key table: 0xffff (index 0), 0x8002 (index 1).
	parts := filepath.Join(t.TempDir(), "partitions.conf")
	if err := os.WriteFile(parts, []byte("Default=0x7fff : ALL=full;\ngreen=0x0002 : ALL=full;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemonConfig(t, "", "127.0.0.100", fmt.Sprintf(`
partitions: %s
tenants:
  - name: blue
    match: {uids: [%d]}
    quotas: {max_clients: 2, max_qps: 5, max_mrs: 4, max_memory: 96K}
  - name: green
    match: {uids: [%d]}
    partitions: ["0x8002"]
    quotas: {max_qps: 3, max_mrs: 2}
  - name: ops
    match: {gids: [%d]}
  - name: admin
    match: {uids: [0]}
`, parts, uidBlue, uidGreen, gidOps))

	blue1, line := startTenant(t, bin, uidBlue, uidBlue)
	if line != "ok" {
		t.Fatalf("blue process: %q", line)
	}
	blue2, line := startTenant(t, bin, uidBlue, uidBlue)
	if line != "ok" {
		t.Fatalf("second blue process: %q", line)
	}
	// A third blue process passes blue's max_clients.
	blue3, line := startTenant(t, bin, uidBlue, uidBlue)
	if !strings.HasPrefix(line, "open ") || !strings.Contains(line, `tenant "blue": quota max_clients 2 reached`) {
		t.Errorf("a third blue process: %q, want it refused for blue's max_clients", line)
	}
	blue3.close(t)
	green, line := startTenant(t, bin, uidGreen, uidGreen)
	if line != "ok" {
		t.Fatalf("green process: %q", line)
	}
	// Blue's QPs, summed over its processes.
	blue1.expect(t, "qps 3", "qps 3 nil")
	blue2.expect(t, "qps 10", "qps 2 ", `tenant "blue": quota max_qps 5 reached`, verbs.ErrLimit.Error())
	blue1.expect(t, "qps 1", "qps 0 ", `tenant "blue": quota max_qps 5 reached`)
	// Blue's MRs and bytes: 3 × 32K fill max_memory before max_mrs.
	blue1.expect(t, "mrs 10 32768", "mrs 3 ", `tenant "blue": quota max_memory 98304 bytes reached (98304 registered, 32768 more asked)`)
	blue2.expect(t, "mrs 10 4096", "mrs 0 ", `tenant "blue": quota max_memory`)
	// Green's partitions do not include the default one: a QP of its may
	// name green's P_Key (index 1), not 0xffff (index 0).
	green.expect(t, "init 0", "init ", `pkey_index 0 is P_Key 0xffff, not a partition of tenant "green" (0x8002)`)
	green.expect(t, "init 1", "init nil")
	// Green, attached throughout, gets all of its own.
	green.expect(t, "qps 10", "qps 1 ", `tenant "green": quota max_qps 3 reached`)
	green.expect(t, "mrs 10 4096", "mrs 2 ", `tenant "green": quota max_mrs 2 reached`)

	// A supplementary group is a group the process is in.
	ops, line := startTenant(t, bin, uidOps, uidOps, 5, gidOps)
	if line != "ok" {
		t.Fatalf("ops process: %q", line)
	}
	none, line := startTenant(t, bin, uidNone, uidNone, 5)
	if !strings.HasPrefix(line, "open ") || !strings.Contains(line, fmt.Sprintf("uid %d gid %d", uidNone, uidNone)) ||
		!strings.Contains(line, "matches no tenant") {
		t.Errorf("a process no tenant takes: %q, want it refused naming its uid", line)
	}
	none.close(t)

	st, err := ibexd.QueryStatus(d.sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	who := map[int]ibexdwire.ClientStatus{}
	for _, c := range st.Clients {
		who[c.PID] = c
	}
	for _, c := range []struct {
		p      *tenantProc
		uid    int
		tenant string
		qps    int
	}{{blue1, uidBlue, "blue", 3}, {blue2, uidBlue, "blue", 2}, {green, uidGreen, "green", 3}, {ops, uidOps, "ops", 0}} {
		cs, ok := who[c.p.cmd.Process.Pid]
		if !ok || cs.UID != c.uid || cs.GID != c.uid || cs.Tenant != c.tenant || len(cs.QPs) != c.qps {
			t.Errorf("status of pid %d: %+v; want uid and gid %d, tenant %s, %d QPs", c.p.cmd.Process.Pid, cs, c.uid, c.tenant, c.qps)
		}
		if c.p == ops && !slices.Equal(cs.Groups, []int{5, gidOps}) {
			t.Errorf("status of the ops process: groups %v, want [5 %d]", cs.Groups, gidOps)
		}
		if ok && cs.Cgroup == "" && cgroupV2() {
			t.Errorf("status of pid %d: no cgroup", c.p.cmd.Process.Pid)
		}
	}
	tenants := map[string]ibexdwire.TenantStatus{}
	for _, ts := range st.Tenants {
		tenants[ts.Name] = ts
	}
	if b := tenants["blue"]; b.Clients != 2 || b.MaxClients != 2 || b.QPs != 5 || b.MaxQPs != 5 || b.MRs != 3 || b.MRBytes != 96<<10 || b.MaxMemory != 96<<10 {
		t.Errorf("status of blue: %+v", b)
	}
	// Blue's first process leaves: what it held is blue's again.
	blue1.close(t)
	waitUntil(t, "blue's QPs given back", func() bool {
		st, err := ibexd.QueryStatus(d.sock, 5*time.Second)
		return err == nil && len(st.Tenants) > 0 && st.Tenants[0].QPs == 2 && st.Tenants[0].MRBytes == 0
	})
	blue2.expect(t, "qps 10", "qps 3 ", `tenant "blue": quota max_qps 5 reached`)
}

func cgroupV2() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}

// TestTenantIsolation: a process of tenant blue knows the QP number, the
// GID, an MR's address and rkey of a process of tenant admin on the same
// daemon. Connecting to that QP is refused (the QPN is another tenant's),
// and a WRITE with the rkey fails with REM_ACCESS_ERR (the key is of
// another PD); nor can admin connect to blue's QP. The admin process's
// memory is untouched.
func TestTenantIsolation(t *testing.T) {
	bin := userBin(t)
	startDaemonConfig(t, "", "127.0.0.101", fmt.Sprintf(`
tenants:
  - name: blue
    match: {uids: [%d]}
  - name: admin
    match: {uids: [0]}
`, uidBlue))
	victim := openEnd(t, 4096)
	copy(victim.mr.Bytes(), "admin's")
	if err := victim.qp.Connect(victim.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatalf("admin connects its QP to itself: %v", err)
	}
	blue, line := startTenant(t, bin, uidBlue, uidBlue)
	if line != "ok" {
		t.Fatalf("blue process: %q", line)
	}
	blue.expect(t, "steal "+victim.info(), "connect ", "is a QP of another tenant of this daemon", `tenant "blue" may connect only to its own`,
		"|write "+verbs.WCRemAccessErr.String(), "|cause ", "responder NAK at psn", "remote access error")
	if got := string(victim.mr.Bytes()[:7]); got != "admin's" {
		t.Errorf("admin's MR holds %q after blue's attempts", got)
	}
	// The other way: admin to a QP of blue's.
	blue.expect(t, "qps 1", "qps 1 nil")
	st, err := ibexd.QueryStatus(os.Getenv("IBEX_DAEMON_SOCKET"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var blueQPN uint32
	for _, c := range st.Clients {
		if c.Tenant == "blue" && len(c.QPs) > 0 {
			blueQPN = c.QPs[0].QPN
		}
	}
	if blueQPN == 0 {
		t.Fatalf("status: no QP of blue: %+v", st.Clients)
	}
	e := openEnd(t, 4096)
	ci := e.qp.Info()
	ci.QPN = blueQPN
	err = e.qp.Connect(ci, quick)
	if err == nil || !strings.Contains(err.Error(), "is a QP of another tenant") || !strings.Contains(err.Error(), `tenant "admin"`) {
		t.Errorf("admin connecting to blue's QP %#x: %v", blueQPN, err)
	}
}

// cgroup2Mount is where the cgroup v2 hierarchy is mounted ("" if none).
func cgroup2Mount() string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		// ... mount-point options - fstype source super-options
		pre, post, ok := strings.Cut(l, " - ")
		if f := strings.Fields(pre); ok && len(f) >= 5 && strings.HasPrefix(post, "cgroup2 ") && f[3] == "/" {
			return f[4]
		}
	}
	return ""
}

// TestTenantCgroup: a root process born in a cgroup of its own
// (CLONE_INTO_CGROUP) is given the tenant that matches the cgroup, before
// the one that takes uid 0, with that tenant's quota.
func TestTenantCgroup(t *testing.T) {
	bin := userBin(t)
	mnt := cgroup2Mount()
	if mnt == "" {
		t.Skip("no cgroup v2 hierarchy mounted at the root of its tree")
	}
	name := fmt.Sprintf("tn-ibex-%d", os.Getpid())
	dir := filepath.Join(mnt, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("removing cgroup %s: %v", dir, err)
		}
	})
	cg, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	d := startDaemonConfig(t, "", "127.0.0.102", fmt.Sprintf(`
tenants:
  - name: jobs
    match: {cgroups: [/%s]}
    quotas: {max_qps: 1}
  - name: admin
    match: {uids: [0]}
`, name))
	p := &peerProc{cmd: exec.Command(bin, "-test.run=^$"), exit: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), appEnv+"=tenant")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	p.cmd.Stderr = os.Stderr
	p.stdin, _ = p.cmd.StdinPipe()
	out, _ := p.cmd.StdoutPipe()
	p.out = bufio.NewReader(out)
	if err := p.cmd.Start(); err != nil {
		t.Skipf("cannot start a process in cgroup %s: %v", dir, err)
	}
	go func() { p.exit <- p.cmd.Wait() }()
	defer p.close(t) // before the cgroup is removed
	job := &tenantProc{p}
	if line := p.line(t); line != "ok" {
		t.Fatalf("process in %s: %q", dir, line)
	}
	job.expect(t, "qps 3", "qps 1 ", `tenant "jobs": quota max_qps 1 reached`)
	st, err := ibexd.QueryStatus(d.sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Clients {
		if c.PID == p.cmd.Process.Pid && (c.Tenant != "jobs" || c.Cgroup != "/"+name || c.UID != 0) {
			t.Errorf("status of the process in %s: %+v", dir, c)
		}
	}
	// This process, uid 0 in another cgroup, is admin's: no QP quota.
	e := openEnd(t, 4096)
	cq, _ := e.ctx.CreateCQ(4)
	for range 3 {
		qp, err := e.pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatalf("admin's QP: %v", err)
		}
		defer qp.Destroy()
	}
	defer cq.Destroy()
}

// TestTenantRate: a tenant with a send rate has its WRITEs held back in
// the rings while its token bucket is empty (status: held), and every
// one still completes, in order and intact.
func TestTenantRate(t *testing.T) {
	d := startDaemonConfig(t, "", "127.0.0.103", `
tenants:
  - name: admin
    match: {uids: [0]}
    quotas: {rate: 16M, burst: 64K}
`)
	const chunk, n = 64 << 10, 16 // 1 MiB: 15/16 of it waits for tokens
	a, b := openEnd(t, chunk*n), openEnd(t, chunk*n)
	if err := a.qp.Connect(b.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range a.mr.Bytes() {
		a.mr.Bytes()[i] = byte(i / chunk)
	}
	wrs := make([]verbs.SendWR, n)
	for i := range wrs {
		wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL:        []verbs.SGE{{Addr: a.mr.Addr() + uint64(i*chunk), Length: chunk, LKey: a.mr.LKey()}},
			RemoteAddr: b.mr.Addr() + uint64(i*chunk), RKey: b.mr.RKey()}
	}
	if err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		wc := waitWC(t, a.cq)
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("completion %d: wr %d %v", i, wc.WRID, wc.Status)
		}
	}
	for i, c := range b.mr.Bytes() {
		if c != byte(i/chunk) {
			t.Fatalf("byte %d of the target is %d, want %d", i, c, i/chunk)
		}
	}
	st, err := ibexd.QueryStatus(d.sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Tenants) != 1 || st.Tenants[0].Rate != 16<<20 || st.Tenants[0].Burst != 64<<10 || st.Tenants[0].Held == 0 {
		t.Errorf("tenants in status: %+v; want admin's rate, burst and held WQEs", st.Tenants)
	}
}

// TestForeignHandlesAndKeys: a process speaking the control protocol
// itself names another process's QP number, lkey and rkey. Every id in a
// control message is looked up among the caller's own objects, so the QPN
// names nothing; every key is checked against the PD of the caller's QP
// (each process has PDs of its own in the daemon), so the lkey fails the
// request with LOC_PROT_ERR and the rkey with REM_ACCESS_ERR. The other
// process's QP and memory are untouched. (Within one tenant: across
// tenants the keys are as meaningless, and TestTenantIsolation adds the
// refused connect.)
func TestForeignHandlesAndKeys(t *testing.T) {
	d := startDaemon(t, "127.0.0.105")
	victim := openEnd(t, 4096)
	copy(victim.mr.Bytes(), "victim's")
	vqpn := victim.qp.Num()
	r := dialRaw(t, d)
	r.mustErr(&ibexdwire.Request{Op: ibexdwire.OpModifyQP, QPN: vqpn, Attr: &verbs.QPAttr{State: verbs.QPSErr}, Mask: verbs.AttrState},
		fmt.Sprintf("no QP %#x", vqpn))
	r.mustErr(&ibexdwire.Request{Op: ibexdwire.OpQPStats, QPN: vqpn}, fmt.Sprintf("no QP %#x", vqpn))
	r.mustErr(&ibexdwire.Request{Op: ibexdwire.OpDestroyQP, QPN: vqpn}, fmt.Sprintf("no QP %#x", vqpn))

	post := func(q *rawQP, w hwq.SendWQE) hwq.CQE {
		t.Helper()
		if _, err := q.sq.Reserve(1); err != nil {
			t.Fatal(err)
		}
		if err := w.Encode(q.sq.Entry(0)); err != nil {
			t.Fatal(err)
		}
		q.sq.Publish()
		ibexdwire.Ring(r.db.Mem)
		var cqe hwq.CQE
		waitUntil(t, "a completion", func() bool {
			n, err := r.cq.Available()
			if err != nil {
				t.Fatal(err)
			}
			return n > 0
		})
		buf := make([]byte, hwq.CQESize)
		r.cq.CopyOut(0, buf)
		r.cq.Release(1)
		if err := cqe.Decode(buf); err != nil {
			t.Fatal(err)
		}
		return cqe
	}
	q, pd, _ := r.qp(16)
	own := r.segMR(pd, 4096, 4096, 0x50000, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	r.connectSelf(q)
	// The victim's lkey as the source of a WRITE into this process's own MR.
	cqe := post(q, hwq.SendWQE{WRID: 1, Opcode: ib.WRRDMAWrite, RemoteAddr: 0x50000, RKey: own.RKey,
		SGL: []hwq.SGE{{Addr: victim.mr.Addr(), Length: 8, LKey: victim.mr.LKey()}}})
	if cqe.Status != ib.WCStatus(verbs.WCLocProtErr) {
		t.Errorf("WRITE from the victim's lkey: %v, want LOC_PROT_ERR", verbs.WCStatus(cqe.Status))
	}
	// The victim's address and rkey as the target, through a pair of this
	// process's own QPs: the responder's PD is not the victim's.
	q3, _, _ := r.qp(16)
	q2, pd2, _ := r.qp(16)
	src := r.segMR(pd2, 4096, 4096, 0x60000, verbs.AccessLocalWrite)
	r.connectTo(q2, q3.qpn)
	r.connectTo(q3, q2.qpn)
	cqe = post(q2, hwq.SendWQE{WRID: 2, Opcode: ib.WRRDMAWrite, RemoteAddr: victim.mr.Addr(), RKey: victim.mr.RKey(),
		SGL: []hwq.SGE{{Addr: 0x60000, Length: 8, LKey: src.LKey}}})
	if cqe.Status != ib.WCStatus(verbs.WCRemAccessErr) {
		t.Errorf("WRITE with the victim's rkey: %v, want REM_ACCESS_ERR", verbs.WCStatus(cqe.Status))
	}
	if got := string(victim.mr.Bytes()[:8]); got != "victim's" {
		t.Errorf("the victim's MR holds %q", got)
	}
	if s := victim.qp.State(); s != verbs.QPSReset {
		t.Errorf("the victim's QP is in %v, want RESET still", s)
	}
}

// TestTenantUpgrade: a new daemon that takes over (same config) gives
// each process its tenant again from the kernel's identity and counts
// what it holds against the tenant's quotas: the quota reached before the
// upgrade is reached after it.
func TestTenantUpgrade(t *testing.T) {
	const addr = "127.0.0.106"
	d := startDaemonConfig(t, "", addr, `
tenants:
  - name: admin
    match: {uids: [0]}
    quotas: {max_qps: 2, max_mrs: 2}
`)
	e := openEnd(t, 4096) // a QP and an MR
	qp, err := e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	next := exec.Command(ibexBin, "daemon", "--takeover", "--socket", d.sock, "--config", filepath.Join(filepath.Dir(d.sock), "ibexd.yaml"))
	next.Env = append(os.Environ(), "IBEX_UDP_ADDR="+addr, "IBEX_DAEMON=off")
	next.Stderr = os.Stderr
	if err := next.Start(); err != nil {
		t.Fatal(err)
	}
	nextExit := make(chan error, 1)
	go func() { nextExit <- next.Wait() }()
	select {
	case err := <-d.exit:
		d.done = true
		if err != nil {
			t.Fatalf("the old daemon exited: %v", err)
		}
	case err := <-nextExit:
		t.Fatalf("the new daemon exited before it took over: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the old daemon did not exit within 30 s of the takeover")
	}
	d.cmd, d.exit, d.done = next, nextExit, false
	st, err := ibexd.QueryStatus(d.sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Tenants) != 1 || st.Tenants[0].Name != "admin" || st.Tenants[0].QPs != 2 || st.Tenants[0].MRs != 1 || st.Tenants[0].Clients != 1 {
		t.Errorf("the new daemon's tenants: %+v", st.Tenants)
	}
	if len(st.Clients) != 1 || st.Clients[0].Tenant != "admin" || st.Clients[0].UID != 0 {
		t.Errorf("the new daemon's processes: %+v", st.Clients)
	}
	if _, err := e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq}); err == nil ||
		!strings.Contains(err.Error(), `tenant "admin": quota max_qps 2 reached`) {
		t.Errorf("a third QP after the upgrade: %v", err)
	}
	mr, err := e.pd.AllocMR(4096, allAccess)
	if err != nil {
		t.Fatalf("a second MR after the upgrade: %v", err)
	}
	defer mr.Dereg()
	if _, err := e.pd.AllocMR(4096, allAccess); err == nil || !strings.Contains(err.Error(), `tenant "admin": quota max_mrs 2 reached`) {
		t.Errorf("a third MR after the upgrade: %v", err)
	}
}
