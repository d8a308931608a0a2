package prom

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/ibex-rdma/ibex/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestServe: /metrics and /counters answer from the source, the snapshot
// round-trips through /counters' JSON, and the server stops with its
// context.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := Serve(ctx, "127.0.0.1:0", func() (metrics.Snapshot, error) { return fixed(), nil })
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.Addr().String()
	if s.URL() != base+"/metrics" {
		t.Errorf("URL %s, want %s/metrics", s.URL(), base)
	}

	code, body := get(t, s.URL())
	if code != http.StatusOK || !strings.Contains(body, `node_infiniband_port_packets_transmitted_total{device="udp0",port="1"}`) {
		t.Errorf("GET /metrics: %d\n%s", code, body)
	}
	// The standard process metrics come with it (Prometheus's process_ and go_).
	for _, name := range []string{"process_cpu_seconds_total", "go_goroutines"} {
		if !strings.Contains(body, "\n"+name+" ") {
			t.Errorf("GET /metrics: no %s", name)
		}
	}

	code, body = get(t, base+"/counters")
	var got metrics.Snapshot
	if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil {
		t.Fatalf("GET /counters: %d %v\n%s", code, err, body)
	}
	want := fixed()
	if len(got.Ports) != 1 || len(got.QPs) != 1 || got.Source != want.Source {
		t.Fatalf("GET /counters: %+v, want %+v", got, want)
	}
	if v, ok := got.Port("udp0", 1); !ok || len(v.PMA) != len(metrics.PortNames) || v.PMA[3] != want.Ports[0].PMA[3] {
		t.Errorf("GET /counters: port %+v, want %+v", v, want.Ports[0])
	}
	for _, k := range []string{`"device"`, `"pma"`, `"qpn"`, `"source"`} {
		if !strings.Contains(body, k) {
			t.Errorf("GET /counters: no key %s in\n%s", k, body)
		}
	}

	cancel()
	if err := s.Wait(); err != nil {
		t.Errorf("Wait after the context ended: %v", err)
	}
	if _, err := http.Get(s.URL()); err == nil {
		t.Error("the server still answers after its context ended")
	}
}

// TestServeSourceError: a source that fails makes /metrics answer
// ibex_up 0 (a scrape that fails would lose the process's other metrics
// too) and /counters 503 with the error.
func TestServeSourceError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := Serve(ctx, "127.0.0.1:0", func() (metrics.Snapshot, error) {
		return metrics.Snapshot{}, errors.New("ibexd at /run/ibex/ibexd.sock does not answer")
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Wait()
	defer cancel()
	if code, body := get(t, s.URL()); code != http.StatusOK || !strings.Contains(body, "\nibex_up 0\n") {
		t.Errorf("GET /metrics: %d\n%s", code, body)
	}
	if code, body := get(t, "http://"+s.Addr().String()+"/counters"); code != http.StatusServiceUnavailable || !strings.Contains(body, "does not answer") {
		t.Errorf("GET /counters: %d %s, want 503 and the error", code, body)
	}
}

// TestServeErrors: an address Serve cannot listen on is its error, naming
// the address.
func TestServeErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()
	for _, tc := range []struct {
		addr string
		is   error
		want string
	}{
		{busy, syscall.EADDRINUSE, busy},
		{"9101", nil, `"9101": want host:port`},
		{"", nil, `"": want host:port`},
		{"256.0.0.1:9101", nil, "256.0.0.1:9101"},
	} {
		s, err := Serve(context.Background(), tc.addr, ProcessSource)
		if err == nil {
			t.Errorf("Serve(%q) listens on %v", tc.addr, s.Addr())
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("Serve(%q): %v, want an error naming %s", tc.addr, err, tc.want)
		}
	}
}

// TestServeFromEnv: nothing without IBEX_METRICS; with it, one server per
// process however often it is called; a bad address names the variable.
func TestServeFromEnv(t *testing.T) {
	t.Setenv(EnvVar, "")
	if s, err := ServeFromEnv(context.Background()); s != nil || err != nil {
		t.Fatalf("ServeFromEnv without %s: %v %v", EnvVar, s, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Setenv(EnvVar, "127.0.0.1:0")
	s, err := ServeFromEnv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvVar, "bad")
	if s2, err := ServeFromEnv(ctx); s2 != s || err != nil {
		t.Errorf("a second ServeFromEnv: %v %v, want the first's server", s2, err)
	}
	if code, _ := get(t, s.URL()); code != http.StatusOK {
		t.Errorf("GET %s: %d", s.URL(), code)
	}
	cancel()
	if err := s.Wait(); err != nil {
		t.Error(err)
	}

	// A fresh process (the state reset) with a bad address.
	env.Lock()
	env.done, env.srv, env.err = false, nil, nil
	env.Unlock()
	_, err = ServeFromEnv(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), EnvVar+"=bad: ") {
		t.Errorf("ServeFromEnv with %s=bad: %v, want an error naming the variable", EnvVar, err)
	}
	env.Lock()
	env.done, env.srv, env.err = false, nil, nil
	env.Unlock()
}
