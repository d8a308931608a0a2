// Package store serves a directory of files (training shards, any format)
// over verbs, and reads them back: clients read file ranges by RDMA READ from
// buffers the server keeps registered, or have the server WRITE them into
// the client's registered memory, many ranges per round trip.
//
// # Server
//
// NewServer scans the directory once (regular files, recursively, names
// relative to it; the list is fixed for the server's life), registers a pool
// of buffers once (ServerConfig.PoolBytes in ChunkBytes buffers: its size
// does not depend on the dataset's) and the file list, and accepts clients
// with internal/cm: two RC QPs (see below), one CQ and one goroutine per client. The
// goroutine waits on its CQ (CQ.Wait) when it has nothing to do, so an idle
// server takes no CPU. Per byte the server does one copy: pread from the page
// cache (or O_DIRECT) into a pool buffer. Then either the client RDMA READs
// the buffer (READ mode) or the server RDMA WRITEs it into the client's
// memory and then SENDs the response, which RC's ordering delivers after
// the data (WRITE mode).
//
// A client holds at most MaxHeld buffers (READ mode: from the response that
// names them until a later request releases them; WRITE mode: while their
// WRITEs are in flight). A request's READ buffers are taken all at once or it
// waits, so clients waiting for buffers cannot deadlock one another. Every
// field of every message is checked; a malformed message is answered with a
// status, a bad range with a per-range status. A client whose QP fails (a
// WRITE to a bad rkey, a SEND longer than a receive buffer) or whose TCP
// connection ends is disconnected, and every buffer it held goes back to the
// pool. Any client may RDMA READ the pool's memory: it holds data of the
// served files only, which every client may read anyway.
//
// On a device whose peers are other processes (shm0, udp0, ibexd's), the
// server's and the client's loops poll for 100 µs after their last
// completion before they sleep: polling drives the transport, and a
// sleeper on shm0 hears of a message only at the end of its progress
// loop's nap (a round trip of 4 KiB took ~800 µs sleeping at once, ~60 µs
// polling first, on a loaded host). IBEX_STORE_SPIN=0 turns it off.
//
// # Client
//
// Dial connects, RDMA READs the file list and starts one poller goroutine.
// ReadBatch splits ranges into chunks and chunks into requests of at most the
// server's batch size, keeps up to Depth requests in flight (shared by the
// goroutines calling it), and allocates nothing. The data lands in memory
// from Client.Alloc, registered once; in READ mode other memory works too,
// through staging buffers registered at the first such call and one copy.
//
// # Wire format
//
// Each client has two RC QPs to the server: cm connects the first, which
// carries the requests and responses (SEND/RECV); the second, the data QP,
// carries only one-sided operations: the client's RDMA READs, the server's
// RDMA WRITEs. A transport may hold a READ or WRITE until the SENDs posted
// before it are acknowledged (shm0 does), so on one QP the data would wait
// behind the requests. Since the WRITEs and the response are on different
// QPs, the server posts a WRITE-mode response when the request's WRITEs have
// completed (an RC WRITE completes once placed).
//
// At connect (cm private data, little endian; ConnInfo is
// verbs.ConnInfo's binary form, 48 or 52 bytes):
//
//	client hello               server welcome
//	0  u8  version = 1         0  u8  version = 1
//	1  u8  0                   1  u8  0
//	2  u16 depth asked         2  u16 depth granted (requests in flight)
//	4  u8  ConnInfo length n   4  u32 chunk bytes
//	5  the data QP's ConnInfo  8  u16 max ranges per request
//	                           10 u16 max buffers held
//	                           12 u32 files
//	                           16 u64 file list address
//	                           24 u32 file list rkey
//	                           28 u32 file list bytes
//	                           32 u8  ConnInfo length n
//	                           33 the data QP's ConnInfo
//
// The file list, read by the client with RDMA READ: u32 count, then per
// file u64 size, u16 name length, the name.
//
// A request is one SEND from the client (at most 3088 bytes):
//
//	0  u8  version = 1
//	1  u8  op: 1 READ (answer buffer addresses), 2 WRITE (write to dst)
//	2  u16 ranges n (≤ 64)
//	4  u16 releases r (≤ 256)
//	6  u16 0
//	8  u64 tag (echoed)
//	16 r × u32  buffers released (READ mode: read, no longer needed)
//	16+4r  n × 32 bytes:
//	       0  u32 file index
//	       4  u32 length (1 to chunk)
//	       8  u64 file offset
//	       16 u64 destination address (WRITE)
//	       24 u32 destination rkey (WRITE)
//	       28 u32 0
//
// A response is one SEND from the server:
//
//	0  u8  version = 1
//	1  u8  op (echoed)
//	2  u16 entries (n of the request, 0 if rejected)
//	4  u8  message status (0 ok; else the request was rejected whole:
//	       short, version, op, too many ranges or releases, length,
//	       reserved field, release of a buffer not held)
//	5  u8  0
//	6  u16 0
//	8  u64 tag
//	16 n × 24 bytes:
//	       0  u8  range status (0 ok, 1 no such file, 2 past EOF, 3 bad
//	              length, 4 read error, 5 too many buffers held,
//	              6 reserved field)
//	       1  3 × u8 0
//	       4  u32 length
//	       8  u64 address of the data in the pool (READ)
//	       16 u32 the pool's rkey (READ)
//	       20 u32 buffer to release (READ)
package store
