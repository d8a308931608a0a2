package kv

import (
	"errors"
	"fmt"
)

// The RPC protocol, for PUT, DELETE and STATS (GETs are READs and never
// reach the server). A client sends a request as a SEND into one of the
// receive buffers the server posted for it (credits of them); the server
// answers each with one inline SEND, after reposting the buffer, so a
// reply returns the credit.
//
// Private data at connect, client to server: "IXKV", version 1, 3 zero
// bytes. Server to client (privLen bytes):
//
//	0  "IXKV", 4 version 1, 5..7 zero
//	8  index rkey, 12 arena rkey (uint32)
//	16 index address, 24 index length (uint64)
//	32 arena address, 40 arena length (uint64)
//	48 max key (uint32), 52 max value (uint32)
//	56 request buffer size (uint32), 60 credits (uint32)
//
// Request (reqHdr bytes, then the key, then an inline value):
//
//	0  op: 1 PUT, 2 DELETE, 3 STATS
//	1  flags: bit 0 the value is not inline: the server READs it
//	2  zero (uint16)
//	4  key length (uint32)
//	8  request id (uint64, echoed)
//	16 value length (uint32)
//	20 rkey of the value (uint32; flag 1 only)
//	24 address of the value (uint64; flag 1 only)
//
// Reply (repLen bytes, or repHdr for all but STATS):
//
//	0  status (uint8), 1..7 zero
//	8  request id
//	16 PUT: the entry's version; an error: the limit it hit
//	24 STATS: statsFields uint64 counters (Stats' fields in order)
const (
	privMagic = "IXKV"
	privVer   = 1
	privLen   = 64

	opPut    = 1
	opDelete = 2
	opStats  = 3

	flagRemote = 1

	reqHdr      = 32
	repHdr      = 24
	statsFields = 20
	repLen      = repHdr + 8*statsFields
)

// Reply statuses.
const (
	stOK       = 0
	stNotFound = 1
	stBad      = 2 // the request broke the protocol
	stTooLarge = 3 // key or value past the server's limit
	stArena    = 4 // the value arena is full
	stIndex    = 5 // the index is at its largest and both buckets are full
	stReadErr  = 6 // the server's READ of the value failed
)

// Errors the client returns, wrapped with what hit them.
var (
	// ErrArenaFull: the server's value arena has no room for the entry.
	ErrArenaFull = errors.New("kv: value arena full")
	// ErrIndexFull: the server's index is at its largest size and the
	// key's buckets are full.
	ErrIndexFull = errors.New("kv: index full")
	// ErrTooLarge: the key or value is larger than the server takes.
	ErrTooLarge = errors.New("kv: too large")
	// ErrProtocol: the peer broke the protocol.
	ErrProtocol = errors.New("kv: protocol error")
	// ErrClosed: the client is closed or its connection is gone.
	ErrClosed = errors.New("kv: closed")
)

// serverInfo is the server's private data.
type serverInfo struct {
	indexRKey, arenaRKey uint32
	indexAddr, indexLen  uint64
	arenaAddr, arenaLen  uint64
	maxKey, maxValue     uint32
	reqSize, credits     uint32
}

func (si serverInfo) encode() []byte {
	b := make([]byte, privLen)
	copy(b, privMagic)
	b[4] = privVer
	put32(b[8:], si.indexRKey)
	put32(b[12:], si.arenaRKey)
	put64(b[16:], si.indexAddr)
	put64(b[24:], si.indexLen)
	put64(b[32:], si.arenaAddr)
	put64(b[40:], si.arenaLen)
	put32(b[48:], si.maxKey)
	put32(b[52:], si.maxValue)
	put32(b[56:], si.reqSize)
	put32(b[60:], si.credits)
	return b
}

func decodeServerInfo(b []byte) (serverInfo, error) {
	var si serverInfo
	if len(b) != privLen || string(b[:4]) != privMagic {
		return si, fmt.Errorf("%w: server's private data of %d bytes is not kv's", ErrProtocol, len(b))
	}
	if b[4] != privVer {
		return si, fmt.Errorf("%w: server speaks version %d, want %d", ErrProtocol, b[4], privVer)
	}
	si = serverInfo{
		indexRKey: le32(b[8:]), arenaRKey: le32(b[12:]),
		indexAddr: le64(b[16:]), indexLen: le64(b[24:]),
		arenaAddr: le64(b[32:]), arenaLen: le64(b[40:]),
		maxKey: le32(b[48:]), maxValue: le32(b[52:]),
		reqSize: le32(b[56:]), credits: le32(b[60:]),
	}
	switch {
	case si.indexLen < minIndexSize || si.indexLen > 1<<40:
		return si, fmt.Errorf("%w: index of %d bytes", ErrProtocol, si.indexLen)
	case si.arenaLen < entryAlign || si.arenaLen > maxArena:
		return si, fmt.Errorf("%w: arena of %d bytes", ErrProtocol, si.arenaLen)
	case si.maxKey == 0 || si.maxKey > maxKeyLimit || si.maxValue > maxValueLimit:
		return si, fmt.Errorf("%w: limits key %d value %d", ErrProtocol, si.maxKey, si.maxValue)
	case si.reqSize < reqHdr+si.maxKey || si.reqSize > 1<<20 || si.credits == 0 || si.credits > 1024:
		return si, fmt.Errorf("%w: request buffers %d x %d bytes", ErrProtocol, si.credits, si.reqSize)
	}
	return si, nil
}

func clientPrivate() []byte { return []byte{'I', 'X', 'K', 'V', privVer, 0, 0, 0} }

func checkClientPrivate(b []byte) error {
	if len(b) != 8 || string(b[:4]) != privMagic || b[4] != privVer || b[5]|b[6]|b[7] != 0 {
		return fmt.Errorf("%w: client's private data %q is not kv version %d's", ErrProtocol, b, privVer)
	}
	return nil
}

// request is a decoded request. key and val alias the receive buffer.
type request struct {
	op     uint8
	remote bool
	id     uint64
	key    []byte
	val    []byte // inline value
	vlen   uint32
	rkey   uint32
	raddr  uint64
}

// decodeRequest checks a received request against the server's limits.
// It never panics, whatever b holds; a failure's reason is for the
// server's counters and log, the client only learns stBad or stTooLarge.
func decodeRequest(b []byte, maxKey, maxValue uint32) (request, uint8, error) {
	var r request
	if len(b) < reqHdr {
		return r, stBad, fmt.Errorf("request of %d bytes, header is %d", len(b), reqHdr)
	}
	r.op, r.remote, r.id = b[0], b[1]&flagRemote != 0, le64(b[8:])
	if b[1]&^flagRemote != 0 || b[2]|b[3] != 0 {
		return r, stBad, fmt.Errorf("request flags %#x %#x %#x", b[1], b[2], b[3])
	}
	klen, vlen := le32(b[4:]), le32(b[16:])
	r.vlen, r.rkey, r.raddr = vlen, le32(b[20:]), le64(b[24:])
	switch r.op {
	case opStats:
		if len(b) != reqHdr || klen != 0 || vlen != 0 || r.remote {
			return r, stBad, fmt.Errorf("stats request with key %d value %d remote %v in %d bytes", klen, vlen, r.remote, len(b))
		}
		return r, stOK, nil
	case opPut, opDelete:
	default:
		return r, stBad, fmt.Errorf("op %d", r.op)
	}
	if klen == 0 {
		return r, stBad, errors.New("empty key")
	}
	if klen > maxKey {
		return r, stTooLarge, fmt.Errorf("key of %d bytes, at most %d", klen, maxKey)
	}
	if uint64(len(b)) < reqHdr+uint64(klen) {
		return r, stBad, fmt.Errorf("key of %d bytes in a %d-byte request", klen, len(b))
	}
	r.key = b[reqHdr : reqHdr+klen]
	rest := b[reqHdr+klen:]
	if r.op == opDelete {
		if vlen != 0 || r.remote || len(rest) != 0 || r.rkey != 0 || r.raddr != 0 {
			return r, stBad, errors.New("delete with a value")
		}
		return r, stOK, nil
	}
	if vlen > maxValue {
		return r, stTooLarge, fmt.Errorf("value of %d bytes, at most %d", vlen, maxValue)
	}
	if r.remote {
		if len(rest) != 0 || vlen == 0 {
			return r, stBad, fmt.Errorf("remote value of %d bytes with %d inline", vlen, len(rest))
		}
		if r.raddr+uint64(vlen) < r.raddr {
			return r, stBad, fmt.Errorf("remote value [%#x, +%d) wraps", r.raddr, vlen)
		}
		return r, stOK, nil
	}
	if r.rkey != 0 || r.raddr != 0 || uint64(len(rest)) != uint64(vlen) {
		return r, stBad, fmt.Errorf("inline value of %d bytes, header says %d", len(rest), vlen)
	}
	r.val = rest
	return r, stOK, nil
}

// encodeRequest writes a request header and key into b and returns the
// bytes used (the caller appends an inline value).
func encodeRequest(b []byte, op uint8, remote bool, id uint64, key []byte, vlen uint32, rkey uint32, raddr uint64) int {
	b[0] = op
	b[1] = 0
	if remote {
		b[1] = flagRemote
	}
	b[2], b[3] = 0, 0
	put32(b[4:], uint32(len(key)))
	put64(b[8:], id)
	put32(b[16:], vlen)
	put32(b[20:], rkey)
	put64(b[24:], raddr)
	return reqHdr + copy(b[reqHdr:], key)
}
