package hwq

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/ib"
)

// BenchmarkRing moves entries from a producer goroutine to a consumer
// goroutine (which spins, never sleeps) in batches of up to 32.
func BenchmarkRing(b *testing.B) {
	for _, size := range []int{CQESize, SendWQESize(testLim)} {
		b.Run(sizeName(size), func(b *testing.B) {
			r := newTestRing(b, size, 1024)
			p, c := ends(b, r, WaitOptions{Spin: time.Second})
			n := b.N
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; i < n; {
					k, _ := p.Reserve(min(32, n-i))
					if k == 0 {
						runtime.Gosched()
						continue
					}
					for j := range k {
						p.Entry(j)[0] = byte(i + j)
					}
					i += p.Publish()
				}
			}()
			b.SetBytes(int64(size))
			b.ResetTimer()
			ctx := context.Background()
			buf := make([]byte, size)
			start := time.Now()
			for i := 0; i < n; {
				a, err := c.Wait(ctx)
				if err != nil {
					b.Fatal(err)
				}
				for j := range a {
					c.CopyOut(j, buf)
				}
				c.Release(a)
				i += a
			}
			el := time.Since(start)
			<-done
			b.ReportMetric(float64(n)/el.Seconds(), "entries/s")
		})
	}
}

// BenchmarkDoorbell is a ping-pong over two rings: one WQE out, one CQE
// back, each side waiting with the given spin. With spin 0 every entry is
// a futex sleep and wake on each side: the doorbell's round trip.
func BenchmarkDoorbell(b *testing.B) {
	for _, spin := range []time.Duration{0, 50 * time.Microsecond} {
		b.Run("spin="+spin.String(), func(b *testing.B) {
			sq := newTestRing(b, SendWQESize(testLim), 64)
			cq := newTestRing(b, CQESize, 64)
			sqp, sqc := ends(b, sq, WaitOptions{Spin: spin})
			cqp, cqc := ends(b, cq, WaitOptions{Spin: spin})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { // the daemon
				defer close(done)
				buf := make([]byte, sq.EntrySize())
				var w SendWQE
				w.SGL = make([]SGE, 0, testLim.MaxSGE)
				for {
					n, err := sqc.Wait(ctx)
					if err != nil {
						return
					}
					for i := range n {
						sqc.CopyOut(i, buf)
						if err := w.Decode(buf, testLim); err != nil {
							panic(err)
						}
						(&CQE{WRID: w.WRID, ByteLen: w.Length}).Push(cqp)
					}
					sqc.Release(n)
				}
			}()
			w := SendWQE{Opcode: ib.WRSend, Flags: ib.SendSignaled, SGL: []SGE{{0x1000, 64, 1}}}
			cbuf := make([]byte, CQESize)
			b.SetBytes(int64(sq.EntrySize()))
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				w.WRID = uint64(i)
				sqp.Reserve(1)
				w.Encode(sqp.Entry(0))
				sqp.Publish()
				if _, err := cqc.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				cqc.CopyOut(0, cbuf)
				cqc.Release(1)
			}
			el := time.Since(start)
			b.StopTimer()
			cancel()
			<-done
			b.ReportMetric(el.Seconds()*1e6/float64(b.N), "µs/roundtrip")
			b.ReportMetric(float64(sqc.sleeps+cqc.sleeps)/float64(b.N), "sleeps/op")
		})
	}
}

func sizeName(n int) string {
	return "entry=" + itoa(n) + "B"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}
