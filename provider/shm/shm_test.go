package shm

import (
	"io"
	"testing"

	"go.uber.org/goleak"

	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/verbstest"
)

func openCtx(t testing.TB) *verbs.Context {
	t.Helper()
	c, err := verbs.Open(DeviceName)
	if err != nil {
		t.Fatalf("open %s: %v", DeviceName, err)
	}
	return c
}

// TestConformanceOneProcess runs the suite with the two ends in two
// contexts of this process: two nodes, each with its own pool and socket,
// that reach each other only through sockets, mappings and
// process_vm_readv/writev, as two processes do.
func TestConformanceOneProcess(t *testing.T) {
	defer goleak.VerifyNone(t)
	verbstest.Run(t, verbstest.Config{
		Open:         func(t testing.TB) (a, b *verbs.Context) { return openCtx(t), openCtx(t) },
		SetPortState: SetPortState,
	})
}

// TestConformanceOneContext: both ends in one context (a QP connected to
// a QP of its own node).
func TestConformanceOneContext(t *testing.T) {
	defer goleak.VerifyNone(t)
	verbstest.Run(t, verbstest.Config{
		Open: func(t testing.TB) (a, b *verbs.Context) {
			c := openCtx(t)
			return c, c
		},
		SetPortState: SetPortState,
	})
}

// TestConformanceTwoProcesses runs the suite with end b in a child
// process: every verbs call on b goes over a socket to the child, and b's
// memory lives there, so every transfer crosses address spaces.
func TestConformanceTwoProcesses(t *testing.T) {
	dial := verbstest.StartChild(t, suiteChildEnv)
	verbstest.Run(t, verbstest.Config{
		Remote: func(t testing.TB) (*verbs.Context, io.ReadWriteCloser) {
			a := openCtx(t)
			conn, err := dial()
			if err != nil {
				t.Fatalf("dial the suite's child: %v", err)
			}
			return a, conn
		},
		SetPortState: SetPortState,
	})
}
