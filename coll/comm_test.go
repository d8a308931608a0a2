package coll

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	_ "github.com/ibex-rdma/ibex/provider/loopback"
	_ "github.com/ibex-rdma/ibex/provider/shm"
	"github.com/ibex-rdma/ibex/verbs"
)

// runRanks runs fn on size ranks (goroutines) of one communicator and
// closes each afterwards.
func runRanks(t *testing.T, size int, opt Options, fn func(c *Comm) error) {
	t.Helper()
	runRanksRaw(t, size, opt, func(c *Comm) error {
		err := fn(c)
		if cerr := c.Close(); err == nil {
			err = cerr
		}
		return err
	})
}

// TestCommLinks: every rank writes its number into every peer's landing
// buffer with WRITE_WITH_IMM; every rank sees all of them.
func TestCommLinks(t *testing.T) {
	for _, tr := range []string{"loop0", ""} {
		for _, size := range []int{1, 2, 3, 5} {
			t.Run(fmt.Sprintf("%s/%d", tr, size), func(t *testing.T) {
				var barrier, end sync.WaitGroup
				barrier.Add(size)
				end.Add(size)
				runRanks(t, size, Options{Transport: tr, Landing: 64 << 10, Credits: 4}, func(c *Comm) error {
					for q, l := range c.links {
						if l == nil {
							continue
						}
						if want := map[string]string{"loop0": "loop0", "": "shm0"}[tr]; c.Transport(q) != want {
							return fmt.Errorf("transport to %d: %s, want %s", q, c.Transport(q), want)
						}
						if err := l.qp.PostRecv([]verbs.RecvWR{{ID: uint64(q)}}); err != nil {
							return err
						}
					}
					barrier.Done()
					barrier.Wait() // every receive is posted before anyone writes
					var src [8]byte
					binary.LittleEndian.PutUint64(src[:], uint64(c.rank)+100)
					var mrs []*verbs.MR
					defer func() {
						for _, mr := range mrs {
							_ = mr.Dereg()
						}
					}()
					for q, l := range c.links {
						if l == nil {
							continue
						}
						mr, err := l.dev.pd.RegMR(append([]byte(nil), src[:]...), verbs.AccessLocalWrite)
						if err != nil {
							return err
						}
						mrs = append(mrs, mr)
						wr := verbs.SendWR{ID: uint64(q), Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: uint32(c.rank),
							SGL: []verbs.SGE{{Addr: mr.Addr(), Length: 8, LKey: mr.LKey()}}, RemoteAddr: l.rAddr, RKey: l.rKey}
						if err := l.qp.PostSend([]verbs.SendWR{wr}); err != nil {
							return err
						}
					}
					// Each peer's write and each of ours completes; the
					// receive completion orders the landing buffer's bytes
					// before we read them.
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					wc := make([]verbs.WC, 1)
					sends, recvs := 0, map[uint32]bool{}
					for sends < size-1 || len(recvs) < size-1 {
						for _, d := range c.devs {
							n, err := d.cq.Poll(wc)
							if err != nil {
								return err
							}
							if n == 0 {
								continue
							}
							if wc[0].Status != verbs.WCSuccess {
								return fmt.Errorf("%v", wc[0])
							}
							if wc[0].Opcode == verbs.WCRDMAWrite {
								sends++
							} else {
								recvs[wc[0].Imm] = true
							}
						}
						if ctx.Err() != nil {
							return fmt.Errorf("%d sends and receives from %v after 10 s", sends, recvs)
						}
					}
					for q, l := range c.links {
						if l == nil {
							continue
						}
						if v := binary.LittleEndian.Uint64(l.land.Bytes()); v != uint64(q)+100 {
							return fmt.Errorf("landing buffer of rank %d holds %d", q, v)
						}
					}
					end.Done()
					end.Wait() // nobody closes while a peer still writes to it
					return nil
				})
			})
		}
	}
}
