package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

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
	goleak.VerifyTestMain(m)
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
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+strings.Join(args, "\n"))
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
