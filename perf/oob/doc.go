// Package oob is the out-of-band TCP exchange of `ibex perf`, byte-compatible
// with perftest 4.5 (Debian bookworm's perftest 4.5+0.17, whose programs send
// the protocol version "6.06"), so that one end can be ibex and the other a
// real ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw or ib_write_lat.
// Only perftest's default socket mode is spoken (not -R/--rdma_cm), and
// neither --report-per-port nor DC/XRC.
//
// # The exchange
//
// The sequence was read from perftest's sources (perftest_communication.c,
// write_bw.c, ...) and from the machine code of the 4.5+0.17 binaries,
// which differ from older sources (two QP rounds, "done", no sleep in most
// programs). It is checked three ways: testdata/*.txt are transcripts
// written from perftest's format strings (gen.py); testdata/recorded are
// exchanges between two real 4.5+0.17 programs, which an ibex end in
// either role reproduces byte for byte; and the real programs run against
// this package on internal/perftestrun's libibexverbs.so (a libibverbs whose
// verbs are ibex's, loaded with LD_PRELOAD): here where the exchange must
// fail, and in cmd/ibex's TestPerf18RealPerftest against ibex perf, exchange
// and data, in both roles.
//
// Every exchange is ctx_xchg_data or ctx_hand_shake over the socket: the
// client writes its message with one write(), then reads the server's; the
// server reads, then writes; both messages have the same size. perftest
// reads a message with a single read() of its exact size, so this package
// writes each message with one write as well.
//
//	step (perftest function)      bytes each way  content
//	connect/accept                -               TCP, port 18515; perftest's client does not retry
//	exchange_versions             16              "6.06", NUL-padded (char version[16])
//	check_version_compatibility   -               peer's version must be >= 5.70 (atof)
//	check_sys_data                4, then 4       cycle_buffer, cache_line_size: int32 big-endian; both keep the larger
//	check_mtu                     2               "%d" of the ibv_mtu enum (1..5) and NUL; both keep the smaller
//	ctx_hand_shake (dest)         108 (59)        "%04x:%04x:%06x:%06x:%08x:%016llx:" lid:out_reads:qpn:psn:rkey:vaddr
//	                                              (out_reads is 1 in the write and send tests),
//	                                              16 x "%02x:" GID, "%08x:" srqn, NUL (KEY_PRINT_FMT_GID);
//	                                              without a GID (gid_index -1): ".....:%08x" srqn, NUL (KEY_PRINT_FMT)
//	xchg_bw_reports               8 x 5           size, iters (uint64), bw_peak, bw_avg, msgRate_avg (IEEE double),
//	                                              big-endian, one ctx_xchg_data each
//	ctx_close_connection          dest, then 5    a ctx_hand_shake, then each end writes "done\0" and closes without reading
//
// The dests of N QPs (ExchangeDests, Ready), per program:
//
//	ib_write_bw, ib_read_bw, ib_atomic_bw:  N dests, [connect QPs], N dests again, sync
//	ib_send_bw:                             N dests, [connect QPs], sync, N dests again
//	ib_write_lat (N = 1):                   dest 0, N dests, [connect QPs], N dests again, sync
//
// A sync is a ctx_hand_shake of QP 0's dest. Around each measured run
// (StartRun, EndRun; with -a once per size, sizes 2..2^23):
//
//	ib_write_bw, ib_read_bw  before: sync if -b.  after: with -b, a sync if -a, then xchg_bw_reports
//	ib_atomic_bw             before: sync if -b.  after: xchg_bw_reports if -b
//	ib_send_bw               before: sync.        after: xchg_bw_reports if -b and not -D; a sync if -a
//	ib_write_lat             nothing
//
// and at the end (Finish):
//
//	ib_write_bw, ib_read_bw, ib_atomic_bw without -b:  sync, xchg_bw_reports, ctx_close_connection
//	the same with -b, and ib_send_bw:                  ctx_close_connection
//	ib_write_lat:                                      nothing (the process exits)
//
// Without -b the perftest server of ib_write_bw, ib_read_bw and ib_atomic_bw
// runs nothing: it goes from Ready straight to Finish, and prints the report
// the client sends there. -D changes nothing on the wire except as noted.
//
// # Detecting mismatched tests
//
// perftest sends neither the test nor its options, so two perftest ends that
// run different tests usually hang or fail in the data phase. This package
// does what can be done with each kind of peer:
//
// With a real perftest peer, it checks what perftest does send: the version,
// the GID types (ctx_check_gid_compatibility), the dest format (a peer with
// or without GIDs is reported, not waited for), that the peer's dests are the
// same in both rounds and in every sync and that its QPNs are distinct
// (different -q), and that a report is not "done" (a latency test against a
// bandwidth test). Everything else (sizes, write against read) it cannot see.
//
// Between two ibex ends, the version message carries a marker: the 16-byte
// version field holds "6.06", a NUL, then "ibex" and an extension version.
// perftest reads that field only with atof/strtod (checked in the 4.5+0.17
// binaries), which stop at the NUL, and sends NULs there itself; so a real
// perftest neither sees nor sends the marker. When both ends see it, they
// exchange their Test (64 bytes) right after the versions and before
// check_sys_data, and each reports the differences as a *MismatchError
// (ErrMismatch): test, -c, -s, -a, -n, -D, -q, -b, GID use. A real perftest
// never reaches that step, so nothing changes for it. Between two ibex ends
// `ibex perf` also puts each QP's receive SPI (verbs.ConnInfo.SPI, package
// psp's encryption; 0 when its device does not encrypt) in the dest's srqn
// field, which RC ignores; towards a real perftest it sends 0 there, as
// perftest does.
//
// # Errors and deadlines
//
// Every blocking call takes a context: its deadline bounds the I/O and its
// cancellation interrupts it (perftest itself waits forever). A Conn is used
// from one goroutine; to interrupt it from another, cancel the context. Errors are *Error values naming the perftest
// step, wrapping ErrRefused, ErrPeerClosed, ErrProtocol, ErrVersion,
// ErrMismatch, ErrState, ErrInvalid or context.DeadlineExceeded. After a
// failed step the connection is closed, as perftest exits, and later calls
// fail with ErrState.
package oob
