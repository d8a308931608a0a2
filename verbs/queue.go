package verbs

import (
	"github.com/ibex-rdma/ibex/verbs/internal/wq"
	"time"
)

// sendSlot is one send-queue entry: the request a provider sees and
// verbs' own requester progress for it.
type sendSlot struct {
	wq.SendWQE

	started   bool
	stalled   bool // waiting forever (timeout 0) for a response
	rnrLeft   uint8
	retryLeft uint8
	notBefore time.Time
}

type sendQueue struct {
	ring    []sendSlot
	head, n int
	issued  int    // requests from head handed to an Issuer
	nextSSN uint64 // ssn of the next posted request
}

func (q *sendQueue) init(depth, maxSGE, maxInline int) {
	q.ring = make([]sendSlot, depth)
	sges := make([]wq.SGE, depth*maxSGE)
	mrs := make([]*wq.Region, depth*maxSGE)
	inl := make([]byte, depth*maxInline)
	for i := range q.ring {
		q.ring[i].SGE = sges[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
		q.ring[i].MRs = mrs[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
		q.ring[i].Inline = inl[i*maxInline : (i+1)*maxInline : (i+1)*maxInline]
	}
}

func (q *sendQueue) at(i int) *sendSlot {
	i += q.head
	if i >= len(q.ring) {
		i -= len(q.ring)
	}
	return &q.ring[i]
}

func (q *sendQueue) pop() {
	w := &q.ring[q.head]
	clear(w.MRs)
	q.head++
	if q.head == len(q.ring) {
		q.head = 0
	}
	q.n--
}

func (q *sendQueue) clear() {
	for q.n > 0 {
		q.pop()
	}
	q.issued = 0
}

// recvWQE is a posted receive request.
type recvWQE struct {
	id     uint64
	sge    []wq.SGE
	mrs    []*wq.Region
	length uint64
	rsn    uint64 // receive sequence number, unique per QP
}

type recvQueue struct {
	ring    []recvWQE
	head, n int
	nextRSN uint64
	baseRSN uint64 // nextRSN at the last RESET
}

func (q *recvQueue) init(depth, maxSGE int) {
	q.ring = make([]recvWQE, depth)
	sges := make([]wq.SGE, depth*maxSGE)
	mrs := make([]*wq.Region, depth*maxSGE)
	for i := range q.ring {
		q.ring[i].sge = sges[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
		q.ring[i].mrs = mrs[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
	}
}

func (q *recvQueue) peek() *recvWQE {
	if q.n == 0 {
		return nil
	}
	return &q.ring[q.head]
}

func (q *recvQueue) pop() {
	clear(q.ring[q.head].mrs)
	q.head++
	if q.head == len(q.ring) {
		q.head = 0
	}
	q.n--
}

func (q *recvQueue) clear() {
	for q.n > 0 {
		q.pop()
	}
}
