package loopback_test

import (
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/ibex-rdma/ibex/provider/loopback"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/verbstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t testing.TB) *verbs.Context {
	t.Helper()
	c, err := verbs.Open(loopback.DeviceName)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestConformance runs the whole suite with the two ends in two contexts of
// loop0, as two processes would open one HCA.
func TestConformance(t *testing.T) {
	verbstest.Run(t, verbstest.Config{
		Open:         func(t testing.TB) (a, b *verbs.Context) { return open(t), open(t) },
		SetPortState: loopback.SetPortState,
	})
}

// TestConformanceOneContext runs it again with both ends in one context.
func TestConformanceOneContext(t *testing.T) {
	verbstest.Run(t, verbstest.Config{
		Open:         func(t testing.TB) (a, b *verbs.Context) { c := open(t); return c, c },
		SetPortState: loopback.SetPortState,
	})
}

func TestOpenByProvider(t *testing.T) {
	c, err := verbs.Open("loopback/" + loopback.DeviceName)
	if err != nil {
		t.Fatal(err)
	}
	if c.Provider() != "loopback" || c.Name() != loopback.DeviceName {
		t.Fatalf("opened %s/%s", c.Provider(), c.Name())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := verbs.Open("shm/" + loopback.DeviceName); !errors.Is(err, verbs.ErrNoDevice) {
		t.Fatalf("open with the wrong provider: %v", err)
	}
}
