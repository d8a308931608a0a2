package prom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// EnvVar names the environment variable ServeFromEnv reads: a listen
// address (127.0.0.1:9101, :9101) to serve this process's counters on.
const EnvVar = "IBEX_METRICS"

// Handler serves src: /metrics in Prometheus's exposition format (ibex's
// counters, with the Go runtime's and the process's standard metrics),
// the process's collectives under NCCL Inspector's names (CollCollector),
// /counters as the snapshot's JSON (metrics.Snapshot), / a page that
// links both. A /metrics scrape whose snapshot fails still answers, with
// ibex_up 0; /counters answers 503 with the error.
func Handler(src Source) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(src), NewCollCollector(),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      log.New(os.Stderr, "ibex metrics: ", 0),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("/counters", func(w http.ResponseWriter, _ *http.Request) {
		s, err := src()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		_ = e.Encode(s)
	})
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<html><head><title>ibex</title></head><body><h1>ibex</h1>`+
			`<p><a href="/metrics">/metrics</a> (Prometheus) <a href="/counters">/counters</a> (JSON)</p></body></html>`+"\n")
	})
	return mux
}

// Server is a running metrics server.
type Server struct {
	addr net.Addr
	done chan struct{}
	err  error // set before done closes
}

// Addr is the address the server listens on (with the port chosen when
// the address gave port 0).
func (s *Server) Addr() net.Addr { return s.addr }

// URL is the server's /metrics address, for messages and clients.
func (s *Server) URL() string { return "http://" + s.addr.String() + "/metrics" }

// Wait blocks until the server has stopped (its context ended and the
// requests in progress finished, for at most 5 s) and returns why it
// stopped, nil after a shutdown by the context.
func (s *Server) Wait() error {
	<-s.done
	return s.err
}

// shutdownGrace bounds how long a stopping server waits for a scrape in
// progress.
const shutdownGrace = 5 * time.Second

// Serve listens on addr (host:port; port 0 picks a free one) and serves
// Handler(src) on it until ctx ends. It returns once it listens, so an
// address it cannot listen on is its error, naming the address. Serve
// starts one goroutine, which ends after ctx does (Wait waits for it).
func Serve(ctx context.Context, addr string, src Source) (*Server, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("metrics: listen address %q: want host:port, such as 127.0.0.1:9101 or :9101: %w", addr, err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	hs := &http.Server{Handler: Handler(src), ReadHeaderTimeout: 10 * time.Second}
	s := &Server{addr: ln.Addr(), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		served := make(chan error, 1)
		go func() { served <- hs.Serve(ln) }()
		select {
		case err := <-served:
			// Serve ends by itself only on an accept error.
			s.err = fmt.Errorf("metrics: serving on %s: %w", s.addr, err)
			return
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			_ = hs.Close()
		}
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.err = fmt.Errorf("metrics: serving on %s: %w", s.addr, err)
		}
	}()
	return s, nil
}

var env struct {
	sync.Mutex
	done bool
	srv  *Server
	err  error
}

// ServeFromEnv serves this process's counters (ProcessSource) on the
// address in IBEX_METRICS until ctx ends; it does nothing and returns nil,
// nil when the variable is empty. A process serves from the environment
// once: later calls return the first call's result. The ibex command
// calls it before each subcommand (except those with a --metrics flag of
// their own, which take IBEX_METRICS as its default); a program of its
// own that uses ibex's verbs calls it once at its start:
//
//	if _, err := prom.ServeFromEnv(ctx); err != nil {
//		log.Fatal(err)
//	}
func ServeFromEnv(ctx context.Context) (*Server, error) {
	env.Lock()
	defer env.Unlock()
	if env.done {
		return env.srv, env.err
	}
	addr := os.Getenv(EnvVar)
	if addr == "" {
		return nil, nil
	}
	env.done = true
	env.srv, env.err = Serve(ctx, addr, ProcessSource)
	if env.err != nil {
		env.err = fmt.Errorf("%s=%s: %w", EnvVar, addr, env.err)
	}
	return env.srv, env.err
}
