package prom

import (
	"context"
	"io"
	"net"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ibex-rdma/ibex/coll"
	"github.com/ibex-rdma/ibex/coll/reduce"
	_ "github.com/ibex-rdma/ibex/provider/shm"
)

// TestCollMetrics: two ranks of this process on shm0 run five all-reduces
// of 64 KiB; /metrics then shows, for each rank, NCCL Inspector's
// nccl_bus_bandwidth_gbs and nccl_collective_exec_time_microseconds of the
// last call, consistent with each other and the size (busbw = bytes /
// time x 2(n-1)/n = bytes / time for two ranks), and five calls done.
func TestCollMetrics(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	id, err := coll.NewUniqueID(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const size, count, calls = 2, 16384, 5
	comms := make([]*coll.Comm, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for rank := range size {
		wg.Go(func() {
			c, err := coll.NewComm(ctx, id, rank, size, coll.Options{})
			if err != nil {
				errs[rank] = err
				return
			}
			comms[rank] = c
			buf := make([]byte, count*reduce.Float32.Size())
			for range calls {
				if err := c.AllReduce(ctx, buf, buf, count, reduce.Float32, reduce.Sum); err != nil {
					errs[rank] = err
					return
				}
			}
		})
	}
	wg.Wait()
	defer func() {
		// Together: a rank's Close waits for the others' goodbyes.
		var wg sync.WaitGroup
		for _, c := range comms {
			if c != nil {
				wg.Go(func() { _ = c.Close() })
			}
		}
		wg.Wait()
	}()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	srv := httptest.NewServer(Handler(ProcessSource))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	cid := comms[0].ID()
	for rank := range size {
		labels := `{collective="all_reduce",comm_id="` + cid + `",n_ranks="2",rank="` + strconv.Itoa(rank) + `"}`
		get := func(name string) float64 {
			t.Helper()
			m := regexp.MustCompile("(?m)^" + regexp.QuoteMeta(name+labels) + ` (\S+)$`).FindStringSubmatch(text)
			if m == nil {
				t.Fatalf("no %s%s in /metrics:\n%s", name, labels, grepLines(text, "nccl_|ibex_coll"))
			}
			v, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		if n := get("ibex_coll_calls_total"); n != calls {
			t.Errorf("rank %d: %v calls, want %d", rank, n, calls)
		}
		if n := get("ibex_coll_calls_failed_total"); n != 0 {
			t.Errorf("rank %d: %v failed calls", rank, n)
		}
		bytes := get("nccl_collective_message_size_bytes")
		if bytes != count*4 {
			t.Errorf("rank %d: size %v, want %d", rank, bytes, count*4)
		}
		us, bus := get("nccl_collective_exec_time_microseconds"), get("nccl_bus_bandwidth_gbs")
		if us <= 0 || bus <= 0 {
			t.Fatalf("rank %d: exec time %v µs, busbw %v GB/s", rank, us, bus)
		}
		// Two ranks: bus factor 2(n-1)/n = 1, so busbw = bytes / time.
		if want := bytes / (us * 1e3); bus < want*0.999 || bus > want*1.001 {
			t.Errorf("rank %d: busbw %v GB/s, want %v (%v bytes in %v µs)", rank, bus, want, bytes, us)
		}
	}
}

// TestCollCollectorEmpty: a process with no communicator (a daemon) sends
// no collective series.
func TestCollCollectorEmpty(t *testing.T) {
	c := &CollCollector{stats: func() []coll.CommStats { return nil }}
	ch := make(chan prometheus.Metric, 16)
	go func() { c.Collect(ch); close(ch) }()
	for m := range ch {
		t.Errorf("sent %v", m.Desc())
	}
}

func grepLines(text, pat string) string {
	var b strings.Builder
	re := regexp.MustCompile(pat)
	for _, l := range strings.Split(text, "\n") {
		if re.MatchString(l) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
