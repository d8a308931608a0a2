package store

import (
	"encoding/binary"
	"fmt"

	"github.com/ibex-rdma/ibex/verbs"
)

// The wire format is drawn in doc.go. Every field a peer sends is checked
// here before the server or the client acts on it.

const (
	wireVersion = 1

	opRead  = 1 // the server fills pool buffers and answers their addresses
	opWrite = 2 // the server RDMA WRITEs each range to the client's address

	// MaxBatchLimit is the most ranges one request message carries.
	MaxBatchLimit = 64
	// MaxHeldLimit is the most pool buffers a client may hold in READ
	// mode, and so the most releases one request carries.
	MaxHeldLimit = 256

	reqHdrLen    = 16
	reqRangeLen  = 32
	releaseLen   = 4
	respHdrLen   = 16
	respEntryLen = 24

	// maxReqLen is the largest valid request; the server's receive
	// buffers are reqBufLen, so a longer SEND fails the client's QP.
	maxReqLen  = reqHdrLen + MaxHeldLimit*releaseLen + MaxBatchLimit*reqRangeLen
	reqBufLen  = 4096
	maxRespLen = respHdrLen + MaxBatchLimit*respEntryLen
	respBufLen = 2048
)

// msgStatus is a whole request's verdict: anything but msgOK rejects the
// message (no range is served, no release applied).
type msgStatus uint8

const (
	msgOK msgStatus = iota
	msgShort
	msgVersion
	msgOp
	msgTooManyRanges
	msgTooManyReleases
	msgLength
	msgReserved
	msgBadRelease
	msgCount
)

var msgStatusText = [msgCount]string{
	msgOK:              "ok",
	msgShort:           "message shorter than its header",
	msgVersion:         "unknown protocol version",
	msgOp:              "unknown operation",
	msgTooManyRanges:   "too many ranges in one request",
	msgTooManyReleases: "too many buffer releases in one request",
	msgLength:          "message length does not match its counts",
	msgReserved:        "reserved field not zero",
	msgBadRelease:      "release of a buffer the client does not hold",
}

func (s msgStatus) String() string {
	if s < msgCount {
		return msgStatusText[s]
	}
	return fmt.Sprintf("message status %d", uint8(s))
}

// rangeStatus is one range's outcome in a response.
type rangeStatus uint8

const (
	rangeOK rangeStatus = iota
	rangeBadFile
	rangePastEOF
	rangeBadLen
	rangeIO
	rangeHeld
	rangeReserved
	rangeCount
)

var rangeStatusText = [rangeCount]string{
	rangeOK:       "ok",
	rangeBadFile:  "no such file index",
	rangePastEOF:  "range past the end of the file",
	rangeBadLen:   "length 0 or larger than the server's chunk",
	rangeIO:       "read error on the server (file changed since the server started?)",
	rangeHeld:     "client holds too many pool buffers",
	rangeReserved: "reserved field not zero",
}

func (s rangeStatus) String() string {
	if s < rangeCount {
		return rangeStatusText[s]
	}
	return fmt.Sprintf("range status %d", uint8(s))
}

// reqRange is one range of a request as sent.
type reqRange struct {
	file uint32
	n    uint32
	off  uint64
	dst  uint64 // WRITE: the client's address
	rkey uint32 // WRITE: the client's rkey
	rsv  uint32
}

// request is a decoded request. It is filled in place from a receive
// buffer, so decoding allocates nothing.
type request struct {
	op     uint8
	tag    uint64
	nrel   int
	rel    [MaxHeldLimit]uint32
	n      int
	ranges [MaxBatchLimit]reqRange
}

// decodeRequest decodes b into r, checking the header, the counts against
// maxBatch and maxRel and the length. Ranges are checked against the file
// table by checkRange.
func decodeRequest(b []byte, maxBatch, maxRel int, r *request) msgStatus {
	r.n, r.nrel, r.op, r.tag = 0, 0, 0, 0
	if len(b) < reqHdrLen {
		return msgShort
	}
	r.tag = binary.LittleEndian.Uint64(b[8:])
	if b[0] != wireVersion {
		return msgVersion
	}
	r.op = b[1]
	if r.op != opRead && r.op != opWrite {
		return msgOp
	}
	n := int(binary.LittleEndian.Uint16(b[2:]))
	nrel := int(binary.LittleEndian.Uint16(b[4:]))
	if binary.LittleEndian.Uint16(b[6:]) != 0 {
		return msgReserved
	}
	if n > maxBatch || n > MaxBatchLimit {
		return msgTooManyRanges
	}
	if nrel > maxRel || nrel > MaxHeldLimit {
		return msgTooManyReleases
	}
	if len(b) != reqHdrLen+nrel*releaseLen+n*reqRangeLen {
		return msgLength
	}
	p := b[reqHdrLen:]
	for i := 0; i < nrel; i++ {
		r.rel[i] = binary.LittleEndian.Uint32(p[i*releaseLen:])
	}
	p = p[nrel*releaseLen:]
	for i := 0; i < n; i++ {
		q := p[i*reqRangeLen : (i+1)*reqRangeLen]
		r.ranges[i] = reqRange{
			file: binary.LittleEndian.Uint32(q[0:]),
			n:    binary.LittleEndian.Uint32(q[4:]),
			off:  binary.LittleEndian.Uint64(q[8:]),
			dst:  binary.LittleEndian.Uint64(q[16:]),
			rkey: binary.LittleEndian.Uint32(q[24:]),
			rsv:  binary.LittleEndian.Uint32(q[28:]),
		}
	}
	r.n, r.nrel = n, nrel
	return msgOK
}

// checkRange checks one range against the file sizes and the chunk size.
func checkRange(rr *reqRange, sizes []int64, chunk int) rangeStatus {
	switch {
	case rr.rsv != 0:
		return rangeReserved
	case uint64(rr.file) >= uint64(len(sizes)):
		return rangeBadFile
	case rr.n == 0 || uint64(rr.n) > uint64(chunk):
		return rangeBadLen
	}
	size := uint64(sizes[rr.file])
	if rr.off > size || uint64(rr.n) > size-rr.off {
		return rangePastEOF
	}
	return rangeOK
}

// encodeRequestHeader writes a request's header.
func encodeRequestHeader(b []byte, op uint8, tag uint64, n, nrel int) {
	b[0], b[1] = wireVersion, op
	binary.LittleEndian.PutUint16(b[2:], uint16(n))
	binary.LittleEndian.PutUint16(b[4:], uint16(nrel))
	binary.LittleEndian.PutUint16(b[6:], 0)
	binary.LittleEndian.PutUint64(b[8:], tag)
}

func encodeRelease(b []byte, i int, buf uint32) {
	binary.LittleEndian.PutUint32(b[reqHdrLen+i*releaseLen:], buf)
}

// encodeRange writes range i of a request with nrel releases.
func encodeRange(b []byte, nrel, i int, rr reqRange) {
	q := b[reqHdrLen+nrel*releaseLen+i*reqRangeLen:]
	binary.LittleEndian.PutUint32(q[0:], rr.file)
	binary.LittleEndian.PutUint32(q[4:], rr.n)
	binary.LittleEndian.PutUint64(q[8:], rr.off)
	binary.LittleEndian.PutUint64(q[16:], rr.dst)
	binary.LittleEndian.PutUint32(q[24:], rr.rkey)
	binary.LittleEndian.PutUint32(q[28:], rr.rsv)
}

func requestLen(n, nrel int) int { return reqHdrLen + nrel*releaseLen + n*reqRangeLen }

// respEntry is one range's answer.
type respEntry struct {
	status rangeStatus
	n      uint32
	addr   uint64 // READ: where the data is in the server's pool
	rkey   uint32 // READ: the pool's rkey
	buf    uint32 // READ: the buffer to release once read
}

func encodeResponseHeader(b []byte, op uint8, st msgStatus, tag uint64, n int) {
	b[0], b[1] = wireVersion, op
	binary.LittleEndian.PutUint16(b[2:], uint16(n))
	b[4], b[5] = byte(st), 0
	binary.LittleEndian.PutUint16(b[6:], 0)
	binary.LittleEndian.PutUint64(b[8:], tag)
}

func encodeEntry(b []byte, i int, e respEntry) {
	q := b[respHdrLen+i*respEntryLen:]
	q[0], q[1], q[2], q[3] = byte(e.status), 0, 0, 0
	binary.LittleEndian.PutUint32(q[4:], e.n)
	binary.LittleEndian.PutUint64(q[8:], e.addr)
	binary.LittleEndian.PutUint32(q[16:], e.rkey)
	binary.LittleEndian.PutUint32(q[20:], e.buf)
}

func respLen(n int) int { return respHdrLen + n*respEntryLen }

// decodeResponseHeader checks a response's header (the client's side: the
// server is checked too). It returns the entry count, the message status and
// the tag.
func decodeResponseHeader(b []byte) (op uint8, st msgStatus, tag uint64, n int, ok bool) {
	if len(b) < respHdrLen || b[0] != wireVersion {
		return 0, 0, 0, 0, false
	}
	n = int(binary.LittleEndian.Uint16(b[2:]))
	if n > MaxBatchLimit || len(b) != respLen(n) {
		return 0, 0, 0, 0, false
	}
	return b[1], msgStatus(b[4]), binary.LittleEndian.Uint64(b[8:]), n, true
}

func decodeEntry(b []byte, i int) respEntry {
	q := b[respHdrLen+i*respEntryLen:]
	return respEntry{
		status: rangeStatus(q[0]),
		n:      binary.LittleEndian.Uint32(q[4:]),
		addr:   binary.LittleEndian.Uint64(q[8:]),
		rkey:   binary.LittleEndian.Uint32(q[16:]),
		buf:    binary.LittleEndian.Uint32(q[20:]),
	}
}

// hello is the client's private data in its connection request: the depth
// it asks for and its data QP, the second QP of the pair, which carries
// only one-sided operations (cm connects the first, which carries the
// requests and responses): a READ or WRITE never waits behind a SEND
// (a transport may hold one-sided requests until earlier SENDs are
// acknowledged).
type hello struct {
	depth int
	data  verbs.ConnInfo
}

const helloHdrLen = 5

func (h hello) encode() ([]byte, error) {
	ci, err := h.data.MarshalBinary()
	if err != nil {
		return nil, err
	}
	b := make([]byte, helloHdrLen, helloHdrLen+len(ci))
	b[0] = wireVersion
	binary.LittleEndian.PutUint16(b[2:], uint16(h.depth))
	b[4] = byte(len(ci))
	return append(b, ci...), nil
}

func decodeHello(b []byte) (hello, error) {
	var h hello
	if len(b) < helloHdrLen || len(b) != helloHdrLen+int(b[4]) {
		return h, fmt.Errorf("hello of %d bytes", len(b))
	}
	if b[0] != wireVersion {
		return h, fmt.Errorf("protocol version %d, want %d", b[0], wireVersion)
	}
	h.depth = int(binary.LittleEndian.Uint16(b[2:]))
	if err := h.data.UnmarshalBinary(b[helloHdrLen:]); err != nil {
		return h, fmt.Errorf("hello: data QP: %w", err)
	}
	return h, nil
}

// welcome is the server's private data in its reply: what the client must
// respect, where the file list is, and the server's data QP.
type welcome struct {
	depth    int // requests in flight granted
	chunk    int
	maxBatch int
	maxHeld  int
	nfiles   int
	catAddr  uint64
	catRKey  uint32
	catLen   int
	data     verbs.ConnInfo
}

const welcomeHdrLen = 33

func (w welcome) encode() ([]byte, error) {
	ci, err := w.data.MarshalBinary()
	if err != nil {
		return nil, err
	}
	b := make([]byte, welcomeHdrLen, welcomeHdrLen+len(ci))
	b[0] = wireVersion
	binary.LittleEndian.PutUint16(b[2:], uint16(w.depth))
	binary.LittleEndian.PutUint32(b[4:], uint32(w.chunk))
	binary.LittleEndian.PutUint16(b[8:], uint16(w.maxBatch))
	binary.LittleEndian.PutUint16(b[10:], uint16(w.maxHeld))
	binary.LittleEndian.PutUint32(b[12:], uint32(w.nfiles))
	binary.LittleEndian.PutUint64(b[16:], w.catAddr)
	binary.LittleEndian.PutUint32(b[24:], w.catRKey)
	binary.LittleEndian.PutUint32(b[28:], uint32(w.catLen))
	b[32] = byte(len(ci))
	return append(b, ci...), nil
}

func decodeWelcome(b []byte) (welcome, error) {
	if len(b) < welcomeHdrLen || b[0] != wireVersion || len(b) != welcomeHdrLen+int(b[32]) {
		return welcome{}, fmt.Errorf("%w: server's welcome of %d bytes (version %d)", ErrProtocol, len(b), firstByte(b))
	}
	w := welcome{
		depth:    int(binary.LittleEndian.Uint16(b[2:])),
		chunk:    int(binary.LittleEndian.Uint32(b[4:])),
		maxBatch: int(binary.LittleEndian.Uint16(b[8:])),
		maxHeld:  int(binary.LittleEndian.Uint16(b[10:])),
		nfiles:   int(binary.LittleEndian.Uint32(b[12:])),
		catAddr:  binary.LittleEndian.Uint64(b[16:]),
		catRKey:  binary.LittleEndian.Uint32(b[24:]),
		catLen:   int(binary.LittleEndian.Uint32(b[28:])),
	}
	if err := w.data.UnmarshalBinary(b[welcomeHdrLen:]); err != nil {
		return w, fmt.Errorf("%w: server's data QP: %w", ErrProtocol, err)
	}
	switch {
	case w.depth < 1:
		return w, fmt.Errorf("%w: server granted depth %d", ErrProtocol, w.depth)
	case w.chunk < 1:
		return w, fmt.Errorf("%w: server's chunk of %d bytes", ErrProtocol, w.chunk)
	case w.maxBatch < 1 || w.maxBatch > MaxBatchLimit:
		return w, fmt.Errorf("%w: server's batch limit %d", ErrProtocol, w.maxBatch)
	case w.maxHeld < 1 || w.maxHeld > MaxHeldLimit:
		return w, fmt.Errorf("%w: server's held-buffer limit %d", ErrProtocol, w.maxHeld)
	case w.catLen < 4:
		return w, fmt.Errorf("%w: server's file list of %d bytes", ErrProtocol, w.catLen)
	}
	return w, nil
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return int(b[0])
}
