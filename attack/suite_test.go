package attack_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

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
	dir, err := buildVictim()
	if err != nil {
		fmt.Fprintf(os.Stderr, "attack: %v; the victims run as this test binary\n", err)
	}
	code := m.Run()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// victimBin is an ibex binary built without the race detector, whose
// `ibex attack` is a victim when IBEX_ATTACK_VICTIM holds its arguments,
// or "": the victims are this test binary. Under -race a victim, which
// runs the providers and the daemon (tested under -race in their own
// packages), is five to ten times slower; IBEX_TEST_CHILD_RACE=1 keeps it
// race-instrumented, as in cmd/ibex.
var victimBin string

func buildVictim() (string, error) {
	if !raceBuild || os.Getenv("IBEX_TEST_CHILD_RACE") == "1" {
		return "", nil
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go tool to build the victims' binary (%v)", err)
	}
	dir, err := os.MkdirTemp("", "ibex-attack-test-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "ibex")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, "github.com/ibex-rdma/ibex/cmd/ibex").CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("go build: %v: %s", err, out)
	}
	victimBin = bin
	return dir, nil
}

func victim(args []string) *exec.Cmd {
	if victimBin != "" {
		cmd := exec.Command(victimBin, "attack")
		cmd.Env = append(os.Environ(), "IBEX_ATTACK_VICTIM="+strings.Join(args, "\n"))
		return cmd
	}
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

// TestSuitePlain runs every case with the victims in plaintext (IBEX_PSP=off).
func TestSuitePlain(t *testing.T) { run(t, attack.Config{}) }

// TestSuiteEncrypted runs every case with the victims requiring
// encryption (IBEX_PSP=required, a key of the suite's making).
func TestSuiteEncrypted(t *testing.T) { run(t, attack.Config{Encrypt: true}) }

// TestControls runs each attack against a target without the defence
// that blocks it: every one must succeed, or the suite's detectors are
// blind and its "blocked" results mean nothing.
func TestControls(t *testing.T) { run(t, attack.Config{Controls: true}) }

// TestEncryptedModeUnavailable: when the victims' packets go out in the
// clear although the encrypted mode asked for IBEX_PSP=required (here a
// wrapper turns it off again), every case is n/a, saying why, rather than
// a "blocked" that encryption did not earn.
func TestEncryptedModeUnavailable(t *testing.T) {
	envBin, err := exec.LookPath("env")
	if err != nil {
		t.Skipf("no env program: %v", err)
	}
	cfg := attack.Config{Encrypt: true, Cases: []string{"inject-spoofed", "replay"}, Victim: func(args []string) *exec.Cmd {
		v := victim(args)
		cmd := exec.Command(envBin, append([]string{"IBEX_PSP=off"}, v.Args...)...)
		cmd.Path, cmd.Env = envBin, v.Env
		return cmd
	}}
	rep, err := attack.Run(cfg)
	if errors.Is(err, attack.ErrNoCapability) {
		t.Skipf("no CAP_NET_RAW for the sniffer and the raw socket: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		t.Logf("%s: %s (%s)", r.Case, r.Got, r.Detail)
		if r.Got != attack.NA || !strings.Contains(r.Detail, "in the clear") {
			t.Errorf("%s: %s (%s), want n/a naming the plaintext", r.Case, r.Got, r.Detail)
		}
	}
}
