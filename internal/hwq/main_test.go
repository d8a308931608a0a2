//go:build linux

package hwq

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// childEnv selects a child role when the test binary re-executes itself for
// a cross-process test.
const childEnv = "IBEX_HWQ_CHILD"

var seedFlag = flag.Uint64("hwq.seed", 0, "replay the randomised tests with this seed (0: a new one each run)")

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		child, ok := children[role]
		if !ok {
			fmt.Fprintf(os.Stderr, "hwq test child: unknown role %q\n", role)
			os.Exit(2)
		}
		if err := child(); err != nil {
			fmt.Fprintf(os.Stderr, "hwq test child %s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// children maps a role to the function the re-executed binary runs.
var children = map[string]func() error{
	"produce": childProduce,
}

func childCmd(role string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+role)
	cmd.Env = append(cmd.Env, strings.TrimSpace("GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// seeded returns the random source of a randomised test and logs its seed,
// so that a failure can be replayed with -hwq.seed.
func seeded(t testing.TB) (*rand.Rand, uint64) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay: go test -run '^%s$' -hwq.seed %d)", seed, t.Name(), seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), seed
}

// alignedBuf returns n zero bytes aligned to Align, in ordinary memory.
func alignedBuf(n int) []byte {
	b := make([]byte, n+Align)
	off := 0
	for uintptrOf(b[off:])%Align != 0 {
		off++
	}
	return b[off : off+n : off+n]
}

// newRing formats an aligned buffer as a queue of count entries of size
// bytes.
func newTestRing(t testing.TB, size, count int) *Ring {
	t.Helper()
	n, err := RegionSize(size, count)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Init(alignedBuf(n), Config{EntrySize: size, Count: count})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ends(t testing.TB, r *Ring, opts WaitOptions) (*Producer, *Consumer) {
	t.Helper()
	p, err := r.Producer()
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.Consumer(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p, c
}
