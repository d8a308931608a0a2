package prom

import (
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/metrics"
	"github.com/ibex-rdma/ibex/verbs"
)

// BenchmarkScrape is one /metrics request over a snapshot of 4 ports and
// 256 QPs, what a busy daemon's status maps to: the cost lands on the
// scrape's goroutine and the snapshot's control-path locks, never on a
// data path, and comes once per scrape interval.
func BenchmarkScrape(b *testing.B) {
	s := fixed()
	p := s.Ports[0]
	q := s.QPs[0]
	s.Ports, s.QPs = nil, nil
	for i := range 4 {
		p.Device = fmt.Sprintf("udp%d", i)
		s.Ports = append(s.Ports, p)
	}
	for i := range 256 {
		q.QPN = uint32(i + 1)
		q.HW = make([]metrics.Counter, len(metrics.HWNames))
		for j, n := range metrics.HWNames {
			q.HW[j] = metrics.Counter{Name: n, Value: uint64(i * j)}
		}
		s.QPs = append(s.QPs, q)
	}
	h := Handler(func() (metrics.Snapshot, error) { return s, nil })
	req := httptest.NewRequest("GET", "/metrics", nil)
	var series int
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		series = w.Body.Len()
		_, _ = io.Discard.Write(w.Body.Bytes())
	}
	b.ReportMetric(float64(series), "bytes/scrape")
}

// BenchmarkWriteScraped times one 4 KiB WRITE round trip between two udp
// devices in the process, with nobody scraping and with a scraper taking
// ProcessSource's snapshot every millisecond (a thousand times
// Prometheus's 1 s): the snapshot takes each QP's lock for a copy of its
// state, which a PostSend meeting it waits out, and nothing per packet.
func BenchmarkWriteScraped(b *testing.B) {
	for _, every := range []time.Duration{0, time.Millisecond} {
		name := "idle"
		if every > 0 {
			name = "scraped-every-" + every.String()
		}
		b.Run(name, func(b *testing.B) {
			da, db := newDevices(b)
			w := newWriter(b, da, db)
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				if every == 0 {
					return
				}
				tk := time.NewTicker(every)
				defer tk.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tk.C:
						_, _ = ProcessSource()
					}
				}
			}()
			wr := []verbs.SendWR{{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL:        []verbs.SGE{{Addr: w.a.mr.Addr(), Length: 4096, LKey: w.a.mr.LKey()}},
				RemoteAddr: w.b.mr.Addr(), RKey: w.b.mr.RKey()}}
			wc := make([]verbs.WC, 1)
			b.SetBytes(4096)
			for b.Loop() {
				if err := w.a.qp.PostSend(wr); err != nil {
					b.Fatal(err)
				}
				for {
					n, err := w.a.cq.Poll(wc)
					if err != nil {
						b.Fatal(err)
					}
					if n == 1 {
						break
					}
				}
			}
			close(stop)
			<-done
		})
	}
}
