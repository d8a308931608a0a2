package udp

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/verbs/driver"
)

// opened is one context's view of the device: the driver.Device that Open
// returns.
type opened struct {
	dev    *device
	ctx    driver.Context
	closed bool
}

func (drv *opened) NewQP(qp driver.QP) (driver.QPDriver, error) {
	q := &qpDriver{dev: drv.dev, qp: qp}
	q.works = make([]driver.SendWork, qp.Cap().MaxSendWR)
	for i := range q.works {
		q.works[i].Init(qp.Cap().MaxSendSGE, qp.Cap().MaxInlineData)
	}
	q.initPSP()
	drv.dev.post(cmd{kind: cmdAddQP, q: q})
	return q, nil
}

func (drv *opened) Close() error {
	drv.dev.mu.Lock()
	drv.closed = true
	drv.dev.mu.Unlock()
	prov.release(drv.dev)
	return nil
}

// AllocMem gives AllocMR page-aligned memory mapped outside the Go heap:
// the garbage collector never scans or moves it, and RDMA buffers of any
// size cost it nothing. Freed (unmapped) after Dereg.
func (drv *opened) AllocMem(n int) ([]byte, func(), error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, fmt.Errorf("udp: alloc mr: mmap %d bytes: %w", n, err)
	}
	return b, func() { _ = unix.Munmap(b) }, nil
}
