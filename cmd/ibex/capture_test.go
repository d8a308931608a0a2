package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/daemon"
	"github.com/ibex-rdma/ibex/internal/pcap"
	"github.com/ibex-rdma/ibex/verbs"
)

// Issue 20, "Observability": ibex capture writes a daemon device's
// RoCEv2 traffic as pcap that tshark decodes.

// captureAddr is the address of TestCapture's daemon's udp0, one no other
// test binds.
const captureAddr = "127.0.0.66"

// TestCapture runs `ibex capture` against a real daemon while two QPs of
// this process, attached to it, WRITE to each other through its udp0.
func TestCapture(t *testing.T) {
	sock := startDaemonAt(t, captureAddr, "IBEX_DAEMON=off").socket
	t.Setenv("IBEX_DAEMON_SOCKET", sock)
	env := []string{"IBEX_DAEMON_SOCKET=" + sock}
	a, b := statEnds(t)
	dir := t.TempDir()

	t.Run("Count", func(t *testing.T) {
		// -c 10: ten packets, each sent and received by udp0 (both QPs
		// are on it), which tshark decodes as the WRITEs and their ACKs.
		file := filepath.Join(dir, "count.pcap")
		c := startCapture(t, env, "-d", "udp0", "-w", file, "-c", "10")
		statWrites(t, a, b, 5) // 20 packets
		stderr := c.wait(t, 0)
		if want := "10 packets written to " + file; !strings.Contains(stderr, want) {
			t.Errorf("stderr %q, want %q", stderr, want)
		}
		f, err := pcap.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Records) != 10 || f.LinkType != pcap.LinkEthernet {
			t.Fatalf("%d packets of link type %d, want 10 Ethernet frames", len(f.Records), f.LinkType)
		}
		lines := captureTshark(t, file)
		if lines == nil {
			return
		}
		if len(lines) != 10 {
			t.Fatalf("tshark decoded %d packets, want 10:\n%s", len(lines), strings.Join(lines, "\n"))
		}
		for i, l := range lines {
			// WRITE Only (10) to b's QP, or the ACK (17) to a's.
			w1 := fmt.Sprintf("%s\t%s\t4791\t10\t0x%06x", captureAddr, captureAddr, b.qp.Num())
			w2 := fmt.Sprintf("%s\t%s\t4791\t17\t0x%06x", captureAddr, captureAddr, a.qp.Num())
			if l != w1 && l != w2 {
				t.Errorf("tshark, packet %d: %q, want %q or %q", i, l, w1, w2)
			}
		}
	})

	t.Run("InterruptRing", func(t *testing.T) {
		// No -c: Ctrl-C ends it; a ring of 4 keeps the newest 4. A second
		// capture of the device meanwhile is refused.
		file := filepath.Join(dir, "ring.pcap")
		c := startCapture(t, env, "-d", "udp0", "-w", file, "--ring", "4")
		_, stderr, code := runMainWithin(t, 30*time.Second, env, "capture", "-d", "udp0", "-w", filepath.Join(dir, "busy.pcap"))
		if code != 1 || !strings.Contains(stderr, "already being captured") {
			t.Errorf("a second capture: exit %d, stderr %q; want 1 and already being captured", code, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "busy.pcap")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the refused capture left its file behind (%v)", err)
		}
		statWrites(t, a, b, 5)
		if err := c.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		stderr = c.wait(t, 0)
		var written, seen, over int
		for _, l := range strings.Split(stderr, "\n") {
			if strings.Contains(l, "packets written") {
				_, err := fmt.Sscanf(l, "ibex capture: %d packets written to "+file+" (%d captured, %d overwritten", &written, &seen, &over)
				if err != nil {
					t.Fatalf("%q: %v", l, err)
				}
			}
		}
		if written != 4 || seen < 20 || over != seen-4 {
			t.Errorf("%d written, %d captured, %d overwritten; want 4 of at least 20, the rest overwritten", written, seen, over)
		}
		if f, err := pcap.ReadFile(file); err != nil || len(f.Records) != 4 {
			t.Errorf("the file: %v, want 4 packets", err)
		}
	})

	t.Run("SecondsStdout", func(t *testing.T) {
		// -G 1 ends it with nothing sent; -w - writes the pcap to stdout.
		stdout, stderr, code := runMainWithin(t, 30*time.Second, env, "capture", "-w", "-", "-G", "1")
		if code != 0 || !strings.Contains(stderr, "0 packets written to standard output") {
			t.Errorf("-G 1 with no traffic: exit %d, stderr %q", code, stderr)
		}
		if f, err := pcap.Read(strings.NewReader(stdout)); err != nil || len(f.Records) != 0 || f.LinkType != pcap.LinkEthernet {
			t.Errorf("standard output: %v, want an empty Ethernet capture", err)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		existing := filepath.Join(dir, "existing.pcap")
		if err := os.WriteFile(existing, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			args []string
			want string
			file string // must not exist afterwards
		}{
			{"bad device", []string{"-d", "nope0", "-w", filepath.Join(dir, "nope.pcap")}, `has no device "nope0"; it owns [udp0]`, filepath.Join(dir, "nope.pcap")},
			{"unwritable path", []string{"-w", filepath.Join(dir, "no", "such", "dir.pcap")}, "no such file or directory", ""},
			{"a directory", []string{"-w", dir}, "is a directory", ""},
			{"count 0", []string{"-w", filepath.Join(dir, "c0.pcap"), "-c", "0"}, "-c 0: the packet count must be positive", filepath.Join(dir, "c0.pcap")},
			{"no file", []string{"-c", "5"}, "-w FILE is required", ""},
			{"snaplen", []string{"-w", filepath.Join(dir, "snap.pcap"), "--snaplen", "10"}, "snaplen 10: fewer than the 74 bytes", filepath.Join(dir, "snap.pcap")},
			{"ring too big", []string{"-w", filepath.Join(dir, "big.pcap"), "--ring", "100000000"}, "more than 1073741824 bytes", filepath.Join(dir, "big.pcap")},
			{"no daemon", []string{"-w", filepath.Join(dir, "nod.pcap"), "--socket", filepath.Join(dir, "none.sock")}, "no daemon answers on " + filepath.Join(dir, "none.sock"), filepath.Join(dir, "nod.pcap")},
		} {
			_, stderr, code := runMainWithin(t, 30*time.Second, env, append([]string{"capture"}, c.args...)...)
			if code != 1 || !strings.Contains(stderr, c.want) {
				t.Errorf("%s: exit %d, stderr %q; want 1 and %q", c.name, code, stderr, c.want)
			}
			if c.file != "" {
				if _, err := os.Stat(c.file); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s: %s left behind (%v)", c.name, c.file, err)
				}
			}
		}
		// A refused capture leaves a file it did not create in place.
		_, stderr, code := runMainWithin(t, 30*time.Second, env, "capture", "-d", "nope0", "-w", existing)
		if b, err := os.ReadFile(existing); code != 1 || err != nil || string(b) != "keep" {
			t.Errorf("refused capture into an existing file: exit %d (%s), file %q %v", code, stderr, b, err)
		}
		// The daemon refuses a descriptor not open for writing.
		ro, err := os.Open(existing)
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		_, err = daemon.Capture(context.Background(), daemon.CaptureOptions{Socket: sock, Device: "udp0", Out: ro, Count: 1}, nil)
		if err == nil || !strings.Contains(err.Error(), "not open for writing") || !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("capture into a read-only descriptor: %v, want not open for writing (invalid argument)", err)
		}
	})
}

// runningCapture is an `ibex capture` child.
type runningCapture struct {
	cmd    *exec.Cmd
	stderr chan string // the whole stderr, when it ends
}

// startCapture starts `ibex capture args` and returns once it says it
// captures.
func startCapture(t *testing.T, env []string, args ...string) *runningCapture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	c := &runningCapture{cmd: ibexCmd(ctx, env, append([]string{"capture"}, args...)...), stderr: make(chan string, 1)}
	t.Cleanup(cancel)
	pipe, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan bool, 1)
	go func() {
		var all strings.Builder
		sc := bufio.NewScanner(pipe)
		said := false
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if !said && strings.HasPrefix(sc.Text(), "ibex capture: capturing ") {
				said = true
				started <- true
			}
		}
		if !said {
			started <- false
		}
		c.stderr <- all.String()
	}()
	if !<-started {
		_ = c.cmd.Wait()
		t.Fatalf("ibex capture %v did not start: %s", args, <-c.stderr)
	}
	return c
}

// wait waits for the capture to exit with code and returns its stderr.
func (c *runningCapture) wait(t *testing.T, code int) string {
	t.Helper()
	stderr := <-c.stderr
	err := c.cmd.Wait()
	if got := c.cmd.ProcessState.ExitCode(); got != code {
		t.Fatalf("ibex capture: exit %d (%v), want %d; stderr:\n%s", got, err, code, stderr)
	}
	return stderr
}

// captureTshark decodes a capture with tshark: one line per packet, the
// IP addresses, UDP port, BTH opcode and destination QP; nil (the test
// skipped) without tshark.
func captureTshark(t *testing.T, file string) []string {
	t.Helper()
	bin, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark binary not found in PATH (apt-get install tshark; .ci/run installs it): the capture's decoding by Wireshark is not checked")
		return nil
	}
	out, err := exec.Command(bin, "-r", file, "-d", "udp.port==4791,infiniband", "-T", "fields", "-E", "separator=/t",
		"-e", "ip.src", "-e", "ip.dst", "-e", "udp.dstport", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp").Output()
	if err != nil {
		t.Fatalf("tshark -r %s: %v", file, err)
	}
	return strings.Split(strings.TrimRight(string(out), "\n"), "\n")
}

// statEnds is statPair's two connected ends on the daemon's udp0, with
// nothing sent yet.
func statEnds(t *testing.T) (a, b *statEnd) {
	t.Helper()
	a, b = newStatEnd(t, "ibexd/udp0"), newStatEnd(t, "ibexd/udp0")
	if err := a.qp.Connect(b.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	return a, b
}
