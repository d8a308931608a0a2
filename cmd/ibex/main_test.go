package main

import (
	"bytes"
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
)

// mainArgsEnv makes the test binary run main with the arguments it holds
// (separated by newlines), so tests can check the exit status and stderr.
const mainArgsEnv = "IBEX_TEST_MAIN_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(mainArgsEnv); ok {
		os.Args = append([]string{"ibex"}, strings.Split(args, "\n")...)
		main()
		os.Exit(0)
	}
	dir, err := buildChild()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cmd/ibex: %v; the commands run as this test binary\n", err)
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

// childBin is the ibex binary the tests run as a user does ("": this test
// binary, main() chosen by mainArgsEnv). Under -race it is a build of
// this package without the race detector: a race-instrumented child runs
// five to ten times slower (the simulator, the perftest pairs, coll's rank
// processes), which made cmd/ibex the slowest package in CI, while every
// library package runs its own tests under -race and the tests that call
// the CLI's code in this process still do. IBEX_TEST_CHILD_RACE=1 runs the
// commands as the race-instrumented test binary instead. After go vet (as
// in .ci/run) the build only links.
var childBin string

// childRaceEnv keeps the commands race-instrumented.
const childRaceEnv = "IBEX_TEST_CHILD_RACE"

func buildChild() (dir string, err error) {
	if !raceBuild || os.Getenv(childRaceEnv) == "1" {
		return "", nil
	}
	dir, err = os.MkdirTemp("", "ibex-cmd-test-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "ibex")
	if err := goBuild(bin); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	childBin = bin
	return dir, nil
}

// goBuild builds this package's ibex binary into bin with the extra go
// build flags.
func goBuild(bin string, extra ...string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("no go tool to build the ibex binary (%v)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := append([]string{"build", "-o", bin}, extra...)
	if out, err := exec.CommandContext(ctx, goTool, append(args, ".")...).CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v: %s", err, out)
	}
	return nil
}

// childArgv is the command line and the environment entries that run ibex
// with args, for wrappers such as `ip netns exec`.
func childArgv(args ...string) (argv, env []string) {
	if childBin != "" {
		return append([]string{childBin}, args...), nil
	}
	return []string{os.Args[0], "-test.run=^$"}, []string{mainArgsEnv + "=" + strings.Join(args, "\n")}
}

// childCommand runs ibex with args and env entries added to this
// process's environment.
func childCommand(ctx context.Context, env []string, args ...string) *exec.Cmd {
	argv, extra := childArgv(args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), extra...), env...)
	return cmd
}

// runMain runs main in a child process and returns its stdout, stderr and
// exit code.
func runMain(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runMainIn(t, "", args...)
}

// runMainIn is runMain with the child's working directory dir ("": this
// one's).
func runMainIn(t *testing.T, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := childCommand(context.Background(), nil, args...)
	cmd.Dir = dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

func TestMainErrorExit(t *testing.T) {
	stdout, stderr, code := runMain(t, "devices", "-d", "nope0")
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if want := "ibex: device \"nope0\" not found (devices: "; !strings.HasPrefix(stderr, want) {
		t.Errorf("stderr %q, want it to start with %q", stderr, want)
	}
	if stdout != "" {
		t.Errorf("stdout %q, want nothing", stdout)
	}
}

func TestMainSuccessExit(t *testing.T) {
	stdout, stderr, code := runMain(t, "version")
	if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "ibex ") {
		t.Errorf("ibex version: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// run executes the command tree with args and returns its standard output.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	if errOut.Len() > 0 {
		t.Logf("stderr: %s", errOut.String())
	}
	return out.String(), err
}

func TestVersion(t *testing.T) {
	out, err := run(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "ibex ") || strings.TrimSpace(strings.TrimPrefix(out, "ibex ")) == "" {
		t.Errorf("version output %q, want \"ibex <version>\"", out)
	}
}

func TestRootWithoutSubcommandRunsDemo(t *testing.T) {
	out, err := run(t)
	if err != nil {
		t.Fatalf("ibex: %v\n%s", err, out)
	}
	if !strings.Contains(out, "ibex demo: device loop0") || !strings.Contains(out, "steps passed") {
		t.Errorf("plain ibex did not run the demo:\n%s", out)
	}
}

func TestRootFlagsReachDemo(t *testing.T) {
	out, err := run(t, "--size", "100")
	if err != nil {
		t.Fatalf("ibex --size 100: %v\n%s", err, out)
	}
	if !strings.Contains(out, "message size 100 bytes") {
		t.Errorf("--size not applied:\n%s", out)
	}
}

func TestUnknownSubcommand(t *testing.T) {
	if _, err := run(t, "frobnicate"); err == nil || !strings.Contains(err.Error(), "frobnicate") {
		t.Errorf("ibex frobnicate: err = %v, want an unknown-command error", err)
	}
}

func TestUnknownFlag(t *testing.T) {
	if _, err := run(t, "devices", "--bogus"); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("ibex devices --bogus: err = %v, want an unknown-flag error", err)
	}
}
