//go:build linux

package shmem

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// childEnv selects a child role when the test binary re-executes itself:
// cross-process tests need a second address space, and the test binary is
// the one program sure to be there.
const childEnv = "IBEX_SHMEM_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		child, ok := children[role]
		if !ok {
			fmt.Fprintf(os.Stderr, "shmem test child: unknown role %q\n", role)
			os.Exit(2)
		}
		if err := child(); err != nil {
			fmt.Fprintf(os.Stderr, "shmem test child %s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// children maps a role to the function the re-executed binary runs; each is
// defined next to the test that starts it.
var children = map[string]func() error{
	"exit":    func() error { return nil },
	"futex":   childFutex,
	"vm":      childVM,
	"vmwrite": childVMWrite,
}

// childCmd returns a command that re-executes the test binary (or exe, a
// copy of it) in role.
func childCmd(exe, role string, env ...string) *exec.Cmd {
	if exe == "" {
		exe = os.Args[0]
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+role)
	// Under -race a process lingers a second at exit by default
	// (atexit_sleep_ms); children need not.
	cmd.Env = append(cmd.Env, strings.TrimSpace("GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Env = append(cmd.Env, env...)
	return cmd
}
