package perf

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// TestEvents runs write_bw, write_lat, send_bw and read_bw with -e on both
// ends (loop0, server and client in this process): every request
// completes, the figures are those of a whole run, and both headers say
// the test waits on events, as perftest's.
func TestEvents(t *testing.T) {
	// loop0 may complete a request before its poll: some runs never
	// find their CQ empty, but not all of them.
	waits := eventWaits.Load()
	defer func() {
		if eventWaits.Load() == waits {
			t.Errorf("no end slept on a CQ")
		}
	}()
	for _, c := range []struct {
		test  Test
		size  int
		iters int
	}{
		{WriteBW, 64 << 10, 2000},
		{WriteLat, 8, 2000},
		{SendBW, 4096, 2000},
		{ReadBW, 64 << 10, 1000},
		{SendLat, 8, 1000},
		{ReadLat, 8, 1000},
	} {
		t.Run(c.test.String(), func(t *testing.T) {
			if c.test == WriteLat && raceEnabled {
				// Both ends in one process: loop0 places a WRITE with a
				// plain copy while the other end's goroutine polls the
				// byte with atomic loads, a race by the detector's rules
				// (as any polled RDMA WRITE; -e changes nothing there).
				// cmd/ibex's TestPerf19Events runs write_lat -e between
				// processes.
				t.Skip("write_lat polls memory a WRITE fills: not under -race in one process")
			}
			cfg := Config{Test: c.test, Device: "loop0", Size: c.size, Iters: c.iters, Port: freeTCPPort(t),
				Timeout: 20 * time.Second, Events: true}
			client, server, cliOut, srvOut := runPair(t, cfg)
			if len(client) != 1 {
				t.Fatalf("client: %d results\n%s", len(client), cliOut)
			}
			r := client[0]
			if c.test.Latency() {
				if r.Bytes != c.size || r.Iters != c.iters || r.TMin <= 0 || r.TMin > r.TTypical || r.TTypical > r.TMax {
					t.Fatalf("client result %+v, want %d messages of %d B", r, c.iters, c.size)
				}
			} else if r.Bytes != c.size || r.Iters != c.iters || r.BWAvg <= 0 || r.BWPeak < r.BWAvg*0.999 || r.CPUPerGB <= 0 {
				t.Fatalf("client result %+v, want %d × %d B", r, c.iters, c.size)
			}
			// The server of send_bw counts every SEND; write_bw's and
			// read_bw's print the client's report; write_lat's its own
			// round trips.
			switch c.test {
			case SendBW, WriteBW, ReadBW:
				if len(server) != 1 || server[0].Iters != c.iters || server[0].BWAvg <= 0 {
					t.Fatalf("server results %+v, want %d iterations\n%s", server, c.iters, srvOut)
				}
			case WriteLat, SendLat:
				if len(server) != 1 || server[0].Iters != c.iters {
					t.Fatalf("server results %+v, want %d messages sent\n%s", server, c.iters, srvOut)
				}
			}
			for side, o := range map[string]string{"client": cliOut, "server": srvOut} {
				title, _, _ := strings.Cut(o, " Dual-port")
				if !strings.HasSuffix(title, c.test.title()+"\n Test with events. Using loop0_comp0\n") {
					t.Errorf("%s header does not say events under the title:\n%s", side, o)
				}
			}
		})
	}
}

// TestEventsPolling: without -e the header says nothing of events, no end
// sleeps, and an empty poll's idle allocates nothing.
func TestEventsPolling(t *testing.T) {
	cfg := Config{Test: WriteBW, Device: "loop0", Size: 4096, Iters: 200, Port: freeTCPPort(t), Timeout: 20 * time.Second}
	waits := eventWaits.Load()
	_, _, cliOut, srvOut := runPair(t, cfg)
	if strings.Contains(cliOut+srvOut, "events") {
		t.Fatalf("a polling run mentions events:\n%s\n%s", cliOut, srvOut)
	}
	if eventWaits.Load() != waits {
		t.Errorf("a polling run slept on a CQ")
	}
	s := &session{}
	wd := &watchdog{limit: int64(time.Minute)}
	wd.reset()
	if n := testing.AllocsPerRun(1000, func() { _, _ = s.idle(nil, wd) }); n != 0 {
		t.Errorf("idle without -e: %v allocations", n)
	}
}

// TestEventsNotWithDuration: perftest refuses -e with -D.
func TestEventsNotWithDuration(t *testing.T) {
	_, err := Config{Test: WriteBW, Events: true, Duration: time.Second}.withDefaults()
	if err == nil || !strings.Contains(err.Error(), "Duration mode doesn't work with events") {
		t.Fatalf("-e -D 1: %v", err)
	}
	if _, err := (Config{Test: WriteBW, Events: true}).withDefaults(); err != nil {
		t.Fatalf("-e: %v", err)
	}
}

// TestEventsWaitTimesOut: a wait on a CQ that gets nothing ends when the
// watchdog's limit passes, and reports it; the run's context ending ends
// it with the context's error.
func TestEventsWaitTimesOut(t *testing.T) {
	s := &session{cfg: Config{Device: "loop0"}}
	if err := s.open(); err != nil {
		t.Fatal(err)
	}
	defer s.vc.Close()
	cq, err := s.vc.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Destroy()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.ev = newEvents(ctx)
	defer s.ev.stop()
	wd := &watchdog{limit: int64(30 * time.Millisecond)}
	wd.reset()
	start := time.Now()
	for {
		expired, err := s.idle(cq, wd)
		if err != nil {
			t.Fatal(err)
		}
		if expired {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the wait never expired")
		}
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("expired after %v, limit 30ms", d)
	}
	// A second wait after the timer fired works again (a fresh context).
	wd.reset()
	start = time.Now()
	for {
		expired, err := s.idle(cq, wd)
		if err != nil {
			t.Fatal(err)
		}
		if expired {
			break
		}
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("second wait expired after %v, limit 30ms", d)
	}
	wd.limit = int64(time.Minute)
	wd.reset()
	go func() {
		time.Sleep(20 * time.Millisecond)
		cancel()
	}()
	if _, err := s.idle(cq, wd); err != context.Canceled {
		t.Fatalf("wait after the run's context ended: %v", err)
	}
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// runPair serves one client of cfg in this process and runs it, and
// returns both ends' results and reports.
func runPair(t *testing.T, cfg Config) (client, server []Result, cliOut, srvOut string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var sb, cb bytes.Buffer
	served := make(chan []Result, 1)
	srvDone := make(chan error, 1)
	go func() {
		srvDone <- Serve(ctx, cfg, Options{Out: &sb}, func(r []Result) error {
			served <- r
			return nil
		})
	}()
	ccfg := cfg
	ccfg.Peer = "127.0.0.1"
	client, err := Run(ctx, ccfg, Options{Out: &cb})
	if err != nil {
		cancel()
		<-srvDone
		t.Fatalf("client: %v\n%s\nserver:\n%s", err, cb.String(), sb.String())
	}
	if err := <-srvDone; err != nil {
		t.Fatalf("server: %v\n%s", err, sb.String())
	}
	select {
	case server = <-served:
	default:
	}
	return client, server, cb.String(), sb.String()
}
