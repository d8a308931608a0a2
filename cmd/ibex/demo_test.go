package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/provider/loopback"
	"github.com/ibex-rdma/ibex/verbs"
)

func TestDemoRunsEveryOperation(t *testing.T) {
	var buf bytes.Buffer
	if err := runDemo(context.Background(), &buf, defaultDemoOptions()); err != nil {
		t.Fatalf("demo: %v\n%s", err, buf.String())
	}
	out := buf.String()
	var want []string
	for op := verbs.WRRDMAWrite; op <= verbs.WRAtomicFetchAndAdd; op++ {
		want = append(want, op.String())
	}
	want = append(want,
		verbs.WCRemAccessErr.String(), verbs.WCWRFlushErr.String(),
		"REM_ACCESS_ERR", "WR_FLUSH_ERR", "(3-entry SGE list)", "(inline)",
		"(swaps)", "(compare fails)", "QP_ACCESS_ERR", "Err():",
		"client -> server: qpn=", "server -> client: qpn=",
		"all 11 steps passed")
	for _, s := range want {
		if !strings.Contains(out, s) {
			t.Errorf("demo output does not mention %q", s)
		}
	}
	for i := 1; i <= 11; i++ {
		if step := fmt.Sprintf("[%2d] ", i); !strings.Contains(out, step) {
			t.Errorf("demo output has no step line %q", step)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

func TestDemoSizes(t *testing.T) {
	for _, size := range []int{3, 7, 1001, 1 << 20} {
		var buf bytes.Buffer
		if err := runDemo(context.Background(), &buf, demoOptions{Device: "loop0", Size: size}); err != nil {
			t.Errorf("size %d: %v\n%s", size, err, buf.String())
		}
	}
}

func TestDemoRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opt  demoOptions
		want string
	}{
		{demoOptions{Device: "loop0", Size: 2}, "--size 2"},
		{demoOptions{Device: "loop0", Size: -1}, "--size -1"},
		{demoOptions{Device: "loop0", Size: 1 << 31}, "--size"},
		{demoOptions{Device: "nosuch0", Size: 64}, "nosuch0"},
	} {
		var buf bytes.Buffer
		err := runDemo(context.Background(), &buf, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want one mentioning %q", tc.opt, err, tc.want)
		}
	}
}

func TestDemoCommand(t *testing.T) {
	out, err := run(t, "demo", "-d", "loop0", "--size", "512")
	if err != nil {
		t.Fatalf("ibex demo: %v\n%s", err, out)
	}
	if !strings.Contains(out, "message size 512 bytes") || !strings.Contains(out, "WR_FLUSH_ERR") {
		t.Errorf("unexpected output:\n%s", out)
	}
}

// TestDemoFailsLoudly takes loop0's port down so that requests get no
// response: the demo must stop at the first step with an error naming it.
func TestDemoFailsLoudly(t *testing.T) {
	loopback.SetPortState(verbs.PortDown)
	defer loopback.SetPortState(verbs.PortActive)
	var buf bytes.Buffer
	err := runDemo(context.Background(), &buf, demoOptions{Device: "loop0", Size: 64})
	if err == nil {
		t.Fatalf("demo succeeded with the port down:\n%s", buf.String())
	}
	t.Logf("error: %v", err)
	for _, s := range []string{"step 1 SEND", "RETRY_EXC_ERR"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	if strings.Contains(buf.String(), "steps passed") {
		t.Errorf("output claims success:\n%s", buf.String())
	}
}
