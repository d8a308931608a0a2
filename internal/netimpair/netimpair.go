// Package netimpair makes links lossy for tests that run RoCEv2 traffic
// between network namespaces: Impair a veth pair's ends (tc netem where
// the kernel has it, else nftables random drops and a tbf queue: this
// project's CI kernel is built without CONFIG_NET_SCH_NETEM), or Routed, a
// path through a router namespace that drops in its forward hook, which
// AF_XDP traffic crosses too.
package netimpair

import (
	"os/exec"
	"strings"
	"testing"
)

// End is one end of a link: a device in a network namespace ("" for the
// caller's own).
type End struct{ NS, Dev string }

func (e End) cmd(args ...string) []string {
	if e.NS == "" {
		return args
	}
	return append([]string{"ip", "netns", "exec", e.NS}, args...)
}

// Impair makes each end drop 1% of what it sends (and, with netem, delay
// and reorder it); it logs which impairment it set up, and skips the test
// when neither netem nor the nft command is available.
func Impair(t testing.TB, ends ...End) {
	t.Helper()
	netem := []string{"netem", "loss", "1%", "delay", "200us", "100us", "reorder", "5%"}
	first := ends[0]
	out, err := run(first.cmd(append([]string{"tc", "qdisc", "add", "dev", first.Dev, "root"}, netem...)...))
	if err == nil {
		for _, e := range ends[1:] {
			must(t, e.cmd(append([]string{"tc", "qdisc", "add", "dev", e.Dev, "root"}, netem...)...)...)
		}
		t.Logf("impairment: tc netem %s on every end", strings.Join(netem[1:], " "))
		return
	}
	if !strings.Contains(out, "unknown") {
		t.Fatalf("tc qdisc add netem: %v: %s", err, out)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("cannot impair the link: the kernel has no netem and the nft command (nftables) is not installed")
	}
	tbf := []string{"tbf", "rate", "2gbit", "burst", "256kb", "latency", "2ms"}
	for _, e := range ends {
		must(t, e.cmd(append([]string{"tc", "qdisc", "add", "dev", e.Dev, "root"}, tbf...)...)...)
		table := "ibex_loss_" + e.Dev
		must(t, e.cmd("nft", "add", "table", "inet", table)...)
		must(t, e.cmd("nft", "add", "chain", "inet", table, "out", "{ type filter hook output priority 0 ; }")...)
		must(t, e.cmd("nft", "add", "rule", "inet", table, "out", "oifname", e.Dev, "udp", "dport", "4791", "numgen", "random", "mod", "100", "0", "drop")...)
		if e.NS == "" {
			t.Cleanup(func() { _ = exec.Command("nft", "delete", "table", "inet", table).Run() })
		}
	}
	t.Logf("impairment: the kernel has no netem (%s); 1%% loss by nftables numgen on every end, tbf %s; no reordering", strings.TrimSpace(out), strings.Join(tbf[1:], " "))
}

func run(args []string) (string, error) {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	return string(out), err
}

func must(t testing.TB, args ...string) {
	t.Helper()
	if out, err := run(args); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}
