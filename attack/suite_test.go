package attack_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/attack"
)

// victimArgsEnv makes the test binary a victim process with the arguments
// it holds (separated by newlines).
const victimArgsEnv = "IBEX_ATTACK_VICTIM_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(victimArgsEnv); ok {
		if err := attack.VictimMain(strings.Split(args, "\n"), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func victim(args []string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), victimArgsEnv+"="+strings.Join(args, "\n"))
	return cmd
}

// run runs the suite and fails for every case whose result is not its
// expectation.
func run(t *testing.T, cfg attack.Config) {
	cfg.Victim = victim
	if testing.Verbose() {
		cfg.Log = os.Stderr
	}
	rep, err := attack.Run(cfg)
	if errors.Is(err, attack.ErrNoCapability) {
		t.Skipf("no CAP_NET_RAW for the sniffer and the raw socket: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	_ = rep.WriteText(&b)
	t.Logf("seed %d\n%s", rep.Seed, b.String())
	for _, r := range rep.Results {
		if r.Mismatch() {
			t.Errorf("%s (%s): expected %s, got %s: %s", r.Case, r.Ref, r.Expected, r.Got, r.Detail)
		}
	}
}

func TestSuitePlain(t *testing.T) { run(t, attack.Config{}) }
