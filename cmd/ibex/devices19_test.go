package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
)

// Issue 19, "ibex devices says which mode a device is in": with ibexd
// running, every view works, each device says how this process reaches it,
// and the in-process twin of a daemon's device says why it cannot be
// opened. The daemon and the commands run as a user runs them (child
// processes); the daemon's udp0 is on an address of its own.

// daemonAddr is the address of the test daemon's udp0 (IBEX_UDP_ADDR), one
// no other test binds.
const daemonAddr = "127.0.0.61"

// testDaemon is an `ibex daemon` child.
type testDaemon struct {
	socket string
	pid    int
}

// startDaemon runs `ibex daemon --socket DIR/s.sock` with udp0 on
// daemonAddr and waits until `ibex daemon status` answers. The cleanup
// stops it with SIGTERM and checks that it exits 0.
func startDaemon(t *testing.T) testDaemon { return startDaemonAt(t, daemonAddr) }

// startDaemonAt is startDaemon with udp0 on addr (each test file that
// needs a daemon has an address of its own) and env added to the
// daemon's environment.
func startDaemonAt(t *testing.T, addr string, env ...string) testDaemon {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	out := &syncBuffer{}
	cmd := ibexCmd(context.Background(), append([]string{"IBEX_UDP_ADDR=" + addr}, env...), "daemon", "--socket", sock)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	ready := false
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		var err error
		select {
		case err = <-done:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("ibex daemon still running a minute after SIGTERM:\n%s", out.String())
			return
		}
		if ready && err != nil { // before it is ready, SIGTERM may find no handler yet
			t.Errorf("ibex daemon after SIGTERM: %v, want exit 0:\n%s", err, out.String())
		}
	})

	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("ibex daemon exited before it answered (%v):\n%s", err, out.String())
		default:
		}
		stdout, stderr, code := runMainWithin(t, 30*time.Second, nil, "daemon", "status", "--socket", sock)
		if code == 0 {
			if want := fmt.Sprintf("ibexd pid %d on %s", cmd.Process.Pid, sock); !strings.HasPrefix(stdout, want) {
				t.Fatalf("ibex daemon status: %q, want it to start with %q", stdout, want)
			}
			ready = true
			return testDaemon{socket: sock, pid: cmd.Process.Pid}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ibex daemon status still fails after a minute: exit %d, %s\ndaemon:\n%s", code, stderr, out.String())
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}

// devinfoBlocks splits ibv_devinfo-style output into one block a device,
// each from its "hca_id:" line.
func devinfoBlocks(out string) []string {
	var blocks []string
	for _, b := range strings.SplitAfter(out, "\n\n") {
		if strings.HasPrefix(b, "hca_id:") {
			blocks = append(blocks, b)
		} else if b != "" && len(blocks) > 0 { // a further port of the device
			blocks[len(blocks)-1] += b
		}
	}
	return blocks
}

// tableRows maps "provider/device" to the row's columns in --table output,
// the mode (the last column, which has spaces) cut at its header's column.
func tableRows(t *testing.T, out string) (header []string, rows map[string][]string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) < 3 {
		t.Fatalf("want a header, a rule and rows:\n%s", out)
	}
	modeCol := strings.Index(lines[0], "mode")
	rows = map[string][]string{}
	for _, l := range lines[2:] {
		var f []string
		if modeCol >= 0 && len(l) > modeCol {
			f = append(strings.Fields(l[:modeCol]), l[modeCol:])
		} else {
			f = strings.Fields(l)
		}
		if len(f) < 2 {
			t.Fatalf("row %q", l)
		}
		rows[f[0]+"/"+f[1]] = f
	}
	return strings.Fields(lines[0]), rows
}

func TestDevices19WithDaemon(t *testing.T) {
	d := startDaemon(t)
	env := []string{"IBEX_DAEMON_SOCKET=" + d.socket, "IBEX_UDP_ADDR=" + daemonAddr, "IBEX_DAEMON="}
	ibexdMode := fmt.Sprintf("ibexd (daemon pid %d, socket %s, ", d.pid, d.socket)
	held := fmt.Sprintf("in-process (unavailable: ibexd pid %d holds %s:4791; this process uses ibexd/udp0)", d.pid, daemonAddr)
	devices := func(t *testing.T, env []string, args ...string) string {
		t.Helper()
		args = append([]string{"devices"}, args...)
		stdout, stderr, code := runMainWithin(t, time.Minute, env, args...)
		if code != 0 || stderr != "" {
			t.Fatalf("ibex %s: exit %d, stderr %q, want exit 0 and nothing on stderr\n%s", strings.Join(args, " "), code, stderr, stdout)
		}
		return stdout
	}
	checkIbexdMode := func(t *testing.T, what, mode string) {
		t.Helper()
		if !strings.HasPrefix(mode, ibexdMode) || !strings.HasSuffix(mode, ", udp socket)") && !strings.HasSuffix(mode, ", af_xdp)") {
			t.Errorf("%s: mode %q, want %q and the device's network (udp socket or af_xdp)", what, mode, ibexdMode+"...)")
		}
	}

	t.Run("summary", func(t *testing.T) {
		out := devices(t, env)
		var ibexdSeen, heldSeen int
		for _, b := range devinfoBlocks(out) {
			m := parseDevinfo(t, b) // also checks that every value is in ibv_devinfo's column
			switch {
			case m["board_id"] == "IBEX_IBEXD":
				ibexdSeen++
				if m["hca_id"] != "udp0" {
					t.Errorf("the daemon's device is %q, want udp0", m["hca_id"])
				}
				checkIbexdMode(t, "ibexd/udp0", m["mode"])
				if !strings.Contains(b, "\tphys_port_cnt:\t\t\t1\n\tmode:\t\t\t\tibexd (") {
					t.Errorf("the mode line is not the summary's last device line:\n%s", b)
				}
			case m["hca_id"] == "udp0":
				heldSeen++
				if len(m) != 2 || m["mode"] != held {
					t.Errorf("the in-process udp0: %q, want only its mode %q", b, held)
				}
			default:
				if m["mode"] != "in-process" {
					t.Errorf("%s: mode %q, want in-process", m["hca_id"], m["mode"])
				}
			}
			if _, ok := m["provider"]; ok {
				t.Errorf("the summary has provider, which only -v prints:\n%s", b)
			}
		}
		if ibexdSeen != 1 || heldSeen != 1 {
			t.Errorf("%d ibexd/udp0 and %d in-process udp0 entries, want one each:\n%s", ibexdSeen, heldSeen, out)
		}
		if !strings.Contains(out, "\tmode:\t\t\t\t"+held+"\n\n") {
			t.Errorf("the in-process udp0's entry does not end with an empty line:\n%s", out)
		}
	})

	t.Run("table", func(t *testing.T) {
		out := devices(t, env, "--table")
		header, rows := tableRows(t, out)
		if want := "[provider device node_guid port state mode]"; fmt.Sprint(header) != want {
			t.Errorf("header %v, want %s", header, want)
		}
		r := rows["ibexd/udp0"]
		if len(r) != 5 || r[3] != "1:PORT_ACTIVE" {
			t.Fatalf("ibexd/udp0 row %q:\n%s", r, out)
		}
		checkIbexdMode(t, "--table ibexd/udp0", r[4])
		if r, want := rows["udp/udp0"], []string{"udp", "udp0", "-", "-", held}; fmt.Sprintf("%q", r) != fmt.Sprintf("%q", want) {
			t.Errorf("udp/udp0 row %q, want %q\n%s", r, want, out)
		}
		if r := rows["loopback/loop0"]; len(r) != 5 || r[4] != "in-process" {
			t.Errorf("loopback/loop0 row %q, want its mode in-process\n%s", r, out)
		}
	})

	t.Run("verbose", func(t *testing.T) {
		out := devices(t, env, "-v", "-d", "ibexd/udp0")
		m := parseDevinfo(t, out)
		if m["hca_id"] != "udp0" || m["provider"] != "ibexd" {
			t.Errorf("hca_id %q provider %q, want udp0 and ibexd:\n%s", m["hca_id"], m["provider"], out)
		}
		checkIbexdMode(t, "-v -d ibexd/udp0", m["mode"])
		if !strings.Contains(out, "\tprovider:\t\t\tibexd\n\tmode:\t\t\t\t"+ibexdMode) {
			t.Errorf("the mode line does not follow provider:\n%s", out)
		}
		if n := strings.Count(out, "hca_id:"); n != 1 {
			t.Errorf("%d devices, want ibexd/udp0 alone:\n%s", n, out)
		}

		// -d udp0 is the daemon's, as verbs.Open("udp0") is.
		if out := devices(t, env, "-v", "-d", "udp0"); !strings.Contains(out, "\tprovider:\t\t\tibexd\n") {
			t.Errorf("-d udp0 is not ibexd/udp0:\n%s", out)
		}

		out = devices(t, env, "-v", "-d", "udp/udp0")
		if want := "hca_id:\tudp0\n\tprovider:\t\t\tudp\n\tmode:\t\t\t\t" + held + "\n\n"; out != want {
			t.Errorf("ibex devices -v -d udp/udp0:\n%q\nwant\n%q", out, want)
		}
		// -v of every device works too, and -i.
		all := devices(t, env, "-v", "-i", "1")
		if n := strings.Count(all, "\tmode:\t"); n != strings.Count(all, "hca_id:") || n < 4 {
			t.Errorf("%d mode lines for %d devices:\n%s", n, strings.Count(all, "hca_id:"), all)
		}
	})

	t.Run("list", func(t *testing.T) {
		out := devices(t, env, "-l")
		if strings.Count(out, "\tudp0\n") != 2 || strings.Contains(out, "mode") {
			t.Errorf("ibex devices -l: want udp0 twice (ibexd's, in-process) and only names:\n%s", out)
		}
	})

	t.Run("IBEX_DAEMON=off", func(t *testing.T) {
		off := append(env[:len(env):len(env)], "IBEX_DAEMON=off")
		heldOff := fmt.Sprintf("in-process (unavailable: ibexd pid %d holds %s:4791; IBEX_DAEMON=off keeps this process from using ibexd/udp0)", d.pid, daemonAddr)
		out := devices(t, off)
		if strings.Contains(out, "IBEX_IBEXD") || strings.Contains(out, "ibexd (") || strings.Count(out, "hca_id:\tudp0\n") != 1 {
			t.Errorf("IBEX_DAEMON=off: the daemon's device is listed:\n%s", out)
		}
		if !strings.Contains(out, "hca_id:\tudp0\n\tmode:\t\t\t\t"+heldOff+"\n\n") {
			t.Errorf("IBEX_DAEMON=off: the in-process udp0 does not say %q:\n%s", heldOff, out)
		}
		out = devices(t, off, "--table")
		_, rows := tableRows(t, out)
		if _, ok := rows["ibexd/udp0"]; ok {
			t.Errorf("IBEX_DAEMON=off: --table lists ibexd/udp0:\n%s", out)
		}
		if r := rows["udp/udp0"]; len(r) != 5 || r[4] != heldOff {
			t.Errorf("IBEX_DAEMON=off: udp/udp0 row %q\n%s", r, out)
		}
		if out := devices(t, off, "-l"); strings.Count(out, "\tudp0\n") != 1 {
			t.Errorf("IBEX_DAEMON=off: -l lists udp0 twice:\n%s", out)
		}
	})
}

// Without a daemon the output has no mode line (it is ibv_devinfo's, as
// before issue 19), even with IBEX_DAEMON_SOCKET naming a socket nobody
// serves.
func TestDevices19NoDaemonNoMode(t *testing.T) {
	env := []string{"IBEX_DAEMON_SOCKET=" + filepath.Join(t.TempDir(), "none.sock"), "IBEX_UDP_ADDR=127.0.0.62"}
	for _, args := range [][]string{{"devices"}, {"devices", "-v"}, {"devices", "--table"}} {
		stdout, stderr, code := runMainWithin(t, time.Minute, env, args...)
		if code != 0 || stderr != "" {
			t.Errorf("ibex %s: exit %d, stderr %q", strings.Join(args, " "), code, stderr)
		}
		if strings.Contains(stdout, "mode") || strings.Contains(stdout, "ibexd") {
			t.Errorf("ibex %s without a daemon mentions a mode or ibexd:\n%s", strings.Join(args, " "), stdout)
		}
	}
}

// A device that fails to open for another reason (here its address is
// taken by a plain UDP socket) is listed with the reason, the other
// devices still are, and the command fails naming it.
func TestDevices19OpenFailureListed(t *testing.T) {
	const addr = "127.0.0.63"
	l, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr+":4791")))
	if err != nil {
		t.Skipf("cannot take %s:4791 for the test: %v", addr, err)
	}
	defer l.Close()
	env := []string{"IBEX_DAEMON_SOCKET=" + filepath.Join(t.TempDir(), "none.sock"), "IBEX_UDP_ADDR=" + addr}
	for _, args := range [][]string{{"devices"}, {"devices", "-v"}, {"devices", "--table"}, {"devices", "-d", "udp0"}} {
		stdout, stderr, code := runMainWithin(t, time.Minute, env, args...)
		cmdline := strings.Join(args, " ")
		if code != 1 || !strings.Contains(stderr, "ibex: open udp0: ") || !strings.Contains(stderr, "address already in use") {
			t.Errorf("ibex %s: exit %d, stderr %q; want exit 1 and udp0's open error", cmdline, code, stderr)
		}
		if !slices.Contains(args, "-d") && !strings.Contains(stdout, "loop0") {
			t.Errorf("ibex %s: the other devices are not listed:\n%s", cmdline, stdout)
		}
		if !strings.Contains(stdout, "in-process (unavailable: open udp0: ") || !strings.Contains(stdout, "address already in use)") {
			t.Errorf("ibex %s: udp0 is not listed as unavailable with its error:\n%s", cmdline, stdout)
		}
	}
}

// holder matches a daemon's device to the in-process device by address and
// port, as bind does; IBEX_DAEMON=off changes only the advice.
func TestDevices19Holder(t *testing.T) {
	addr, ok := udp.DeviceAddr(udp.DefaultDevice)
	if !ok {
		t.Fatal("no udp0")
	}
	other := netip.AddrPortFrom(addr.Addr(), addr.Port()+1)
	udp0 := verbs.DeviceName{Provider: "udp", Device: "udp0"}
	dv := func(a netip.AddrPort) daemonView {
		return daemonView{socket: "/s", st: &ibexdwire.Status{PID: 42, Devices: []ibexdwire.DeviceStatus{{Name: "udp7", Address: a.String(), Mode: "socket"}}}}
	}
	want := fmt.Sprintf("ibexd pid 42 holds %s; this process uses ibexd/udp7", addr)
	if got := dv(addr).holder(udp0); got != want {
		t.Errorf("same address: %q, want %q", got, want)
	}
	if got := dv(other).holder(udp0); got != "" {
		t.Errorf("another port: %q, want none", got)
	}
	if got := dv(addr).holder(verbs.DeviceName{Provider: "loopback", Device: "loop0"}); got != "" {
		t.Errorf("loop0: %q, want none", got)
	}
	if got := (daemonView{}).holder(udp0); got != "" {
		t.Errorf("no daemon: %q, want none", got)
	}
	t.Setenv("IBEX_DAEMON", "off")
	if got, want := dv(addr).holder(udp0), "IBEX_DAEMON=off keeps this process from using ibexd/udp7"; !strings.HasSuffix(got, want) {
		t.Errorf("IBEX_DAEMON=off: %q, want it to end with %q", got, want)
	}
	if got, want := dv(addr).ibexdMode("udp7"), "ibexd (daemon pid 42, socket /s, udp socket)"; got != want {
		t.Errorf("ibexdMode = %q, want %q", got, want)
	}
}
