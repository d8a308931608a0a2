package perf

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	_ "github.com/ibex-rdma/ibex/provider/loopback" // loop0
)

func TestSetCPU(t *testing.T) {
	// 1000 × 1 MiB (1.048576 GB) in 2 s of wall time, 0.5 s of CPU:
	// 0.4768 s/GB, 25% of one core.
	r := Result{Bytes: 1 << 20, Iters: 1000}
	r.setCPU(cpuUse{cpu: 5e8, wall: 2e9})
	if r.CPUSeconds != 0.5 || r.CPUPercent != 25 || r.CPUPerGB < 0.4768 || r.CPUPerGB > 0.4769 {
		t.Fatalf("%+v", r)
	}
	var b bytes.Buffer
	writeCPU(&b, r)
	if want := " CPU[s/GB]       : 0.4768\t25.0% of one core\t(#bytes 1048576, user+sys 0.500 s of this process over 2.000 s)\n"; b.String() != want {
		t.Fatalf("CPU line %q, want %q", b.String(), want)
	}
	// No CPU measured (a latency test, a passive server's sweep): no figure, no line.
	r = Result{Bytes: 1 << 20, Iters: 1000}
	r.setCPU(cpuUse{cpu: 0, wall: 2e9})
	b.Reset()
	writeCPU(&b, r)
	if r.CPUSeconds != 0 || b.Len() != 0 {
		t.Fatalf("nothing measured: %+v, line %q", r, b.String())
	}
}

// TestBandwidthReportsCPU runs write_bw and send_bw on loop0, server and
// client in this process, and checks that both ends report the CPU spent
// per GB: above zero and below what the process could have spent (every
// core busy for the whole run).
func TestBandwidthReportsCPU(t *testing.T) {
	for _, test := range []Test{WriteBW, SendBW} {
		t.Run(test.String(), func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			cfg := Config{Test: test, Device: "loop0", Size: 1 << 20, Iters: 300, Port: port, Timeout: 20 * time.Second}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var srvOut bytes.Buffer
			served := make(chan []Result, 1)
			srvDone := make(chan error, 1)
			srvCfg := cfg
			go func() {
				srvDone <- Serve(ctx, srvCfg, Options{Out: &srvOut}, func(r []Result) error {
					served <- r
					cancel()
					return nil
				})
			}()
			cfg.Peer = "127.0.0.1"
			var out bytes.Buffer
			results, err := Run(ctx, cfg, Options{Out: &out})
			if err != nil {
				t.Fatal(err)
			}
			var srv []Result
			select {
			case srv = <-served:
			case <-time.After(cfg.Timeout):
				t.Fatal("the server reported nothing")
			}
			if err := <-srvDone; err != nil {
				t.Fatal(err)
			}
			for side, rs := range map[string][]Result{"client": results, "server": srv} {
				if len(rs) != 1 {
					t.Fatalf("%s: %d results", side, len(rs))
				}
				r := rs[0]
				wall := r.CPUSeconds * 100 / r.CPUPercent
				if r.CPUSeconds <= 0 || r.CPUPerGB <= 0 || r.CPUPercent <= 0 || r.CPUPercent > 100*float64(runtime.NumCPU())+5 {
					t.Fatalf("%s: CPU figures %+v", side, r)
				}
				moved := float64(r.Bytes) * float64(r.Iters) / 1e9
				if d := r.CPUPerGB*moved - r.CPUSeconds; d > 1e-9 || d < -1e-9 {
					t.Fatalf("%s: %.4f s/GB × %.4f GB is not %.4f s", side, r.CPUPerGB, moved, r.CPUSeconds)
				}
				t.Logf("%s: %.4f s/GB, %.1f%% of one core, %.3f s CPU over %.3f s", side, r.CPUPerGB, r.CPUPercent, r.CPUSeconds, wall)
			}
			for side, o := range map[string]string{"client": out.String(), "server": srvOut.String()} {
				_, after, ok := strings.Cut(o, "#bytes")
				if !ok || !strings.Contains(after, rule+"\n CPU[s/GB]       : ") {
					t.Fatalf("%s report has no CPU line after the table:\n%s", side, o)
				}
			}
		})
	}
}
