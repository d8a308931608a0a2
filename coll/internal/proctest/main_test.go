package proctest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ibex-rdma/ibex/coll"
	_ "github.com/ibex-rdma/ibex/provider/shm"
	_ "github.com/ibex-rdma/ibex/provider/udp"
)

// A rank process is this test binary started with these variables set;
// TestMain then runs the named case as that rank instead of the tests.
const (
	envRank      = "IBEX_PROCTEST_RANK"
	envSize      = "IBEX_PROCTEST_SIZE"
	envID        = "IBEX_PROCTEST_ID"        // coll.UniqueID.String()
	envCase      = "IBEX_PROCTEST_CASE"      // a key of rankCases
	envTransport = "IBEX_PROCTEST_TRANSPORT" // coll.Options.Transport ("" = by host)
	envSeed      = "IBEX_PROCTEST_SEED"      // seeds the input values
	envLimit     = "IBEX_PROCTEST_LIMIT"     // the rank's whole deadline (time.Duration)
)

// seedFlag replays a failing run's input values (the seed is logged).
var seedFlag = flag.Uint64("seed", 0, "seed of the input values (0: random)")

// A rankCase is what one rank process does with its communicator.
type rankCase func(ctx context.Context, c *coll.Comm, seed uint64) error

var rankCases = map[string]rankCase{
	"collectives": collectivesCase,
	"udp":         udpCase,
	"udploss":     udpLossCase,
	"loop":        loopCase,
	"p2p":         p2pCase,
}

// TestMain runs a rank when the environment names a case (exit status 0,
// or 1 with the errors on stderr), else the tests, checking that they
// leak no goroutines.
func TestMain(m *testing.M) {
	if name := os.Getenv(envCase); name != "" {
		os.Exit(rankMain(name))
	}
	goleak.VerifyTestMain(m)
}

// rankMain joins the communicator the environment names, runs the case
// and closes; the whole rank is bounded by envLimit. Errors go to stderr
// as they happen (the case's before Close, which may wait for peers), and
// make the exit status 1.
func rankMain(name string) int {
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "rank %s: "+format+"\n", append([]any{os.Getenv(envRank)}, args...)...)
	}
	run, ok := rankCases[name]
	if !ok {
		fail("%s=%q: no such case", envCase, name)
		return 1
	}
	rank, err1 := strconv.Atoi(os.Getenv(envRank))
	size, err2 := strconv.Atoi(os.Getenv(envSize))
	seed, err3 := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	limit, err4 := time.ParseDuration(os.Getenv(envLimit))
	id, err5 := coll.ParseUniqueID(os.Getenv(envID))
	for _, err := range []error{err1, err2, err3, err4, err5} {
		if err != nil {
			fail("rank environment: %v", err)
			return 1
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	c, err := coll.NewComm(ctx, id, rank, size, coll.Options{Transport: os.Getenv(envTransport)})
	if err != nil {
		fail("%v", err)
		return 1
	}
	status := 0
	if err := run(ctx, c, seed); err != nil {
		fail("%v", err)
		status = 1
	}
	if err := c.Close(); err != nil {
		fail("%v", err)
		status = 1
	}
	return status
}
