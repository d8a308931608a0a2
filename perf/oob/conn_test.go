package oob

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// pair connects two ibex ends over loopback.
func pair(t *testing.T) (client, server *Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		var err error
		server, err = ln.Accept(ctx)
		done <- err
	}()
	client, err = Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// both runs f on the two ends at once and returns their errors.
func both(c, s *Conn, f func(c *Conn) error) (errC, errS error) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); errS = f(s) }()
	errC = f(c)
	wg.Wait()
	return
}

func TestIbexPair(t *testing.T) {
	for _, tc := range []Test{
		{Name: WriteBW, QPs: 2, Size: 65536, Iters: 5000},
		{Name: ReadBW, QPs: 2, AllSizes: true, Duplex: true, Iters: 1000},
		{Name: SendBW, QPs: 3, Size: 4096, Iters: 1000},
		{Name: SendBW, QPs: 1, AllSizes: true, Duplex: true, Duration: 5},
		{Name: AtomicBW, QPs: 1, Size: 8, Iters: 1000, Duplex: true},
		{Name: WriteLat, QPs: 1, Size: 2, Iters: 1000},
	} {
		t.Run(tc.Name, func(t *testing.T) {
			c, s := pair(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var mu sync.Mutex
			remotes := map[bool]Params{}
			errC, errS := both(c, s, func(x *Conn) error {
				p := Params{MTU: 1024, Test: tc}
				if x.IsServer() {
					p.MTU = 4096
				}
				r, _, _, err := runIbex(ctx, x, p)
				mu.Lock()
				remotes[x.IsServer()] = r
				mu.Unlock()
				return err
			})
			if errC != nil || errS != nil {
				t.Fatalf("client: %v; server: %v", errC, errS)
			}
			for server, r := range remotes {
				want := tc
				want.Conn = "RC"
				if !r.Ibex || r.Test != want {
					t.Errorf("server=%v: remote %+v, want Ibex and Test %+v", server, r, want)
				}
				if r.Version != Version || r.CycleBuffer != 4096 || r.CacheLineSize != 64 {
					t.Errorf("server=%v: remote %+v", server, r)
				}
			}
			if got := Negotiate(Params{MTU: 4096}, remotes[true]); got.MTU != 1024 {
				t.Errorf("negotiated MTU %d, want the smaller, 1024", got.MTU)
			}
		})
	}
}

func TestIbexMismatch(t *testing.T) {
	c, s := pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errC, errS := both(c, s, func(x *Conn) error {
		p := Params{Test: Test{Name: WriteBW, Size: 64, Iters: 5000}}
		if x.IsServer() {
			p.Test = Test{Name: ReadBW, Size: 4096, Iters: 5000}
		}
		_, err := x.Handshake(ctx, p)
		return err
	})
	for _, err := range []error{errC, errS} {
		var me *MismatchError
		if !errors.As(err, &me) || !errors.Is(err, ErrMismatch) {
			t.Fatalf("want a MismatchError, got %v", err)
		}
		msg := err.Error()
		for _, want := range []string{"test: we ", "write_bw", "read_bw", "size (-s)", "64", "4096"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%q lacks %q", msg, want)
			}
		}
		if len(me.Diffs) != 2 {
			t.Errorf("diffs %q, want test and size", me.Diffs)
		}
	}
	// The error is sticky and the connection closed.
	if _, err := c.ExchangeDests(ctx, []Dest{{}}); !errors.Is(err, ErrState) {
		t.Errorf("after a mismatch: %v, want ErrState", err)
	}
}

func TestIbexGIDMismatch(t *testing.T) {
	c, s := pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errC, errS := both(c, s, func(x *Conn) error {
		if _, err := x.Handshake(ctx, Params{Test: Test{Name: WriteBW}}); err != nil {
			return err
		}
		d := Dest{QPN: 1, GID: [16]byte{0: 0xfe, 1: 0x80, 15: 1}} // link-local IPv6
		if x.IsServer() {
			d.GID = [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 15: 1}
		}
		_, err := x.ExchangeDests(ctx, []Dest{d})
		return err
	})
	for _, err := range []error{errC, errS} {
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "ctx_check_gid_compatibility") {
			t.Errorf("want a GID type mismatch, got %v", err)
		}
	}
}

// fakePeer listens and runs script on the accepted connection.
func fakePeer(t *testing.T, script func(nc net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		script(nc)
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

func perftestVersion() []byte { return []byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00") }

// handshakeAsPerftest plays perftest's server up to the dests.
func handshakeAsPerftest(nc net.Conn) {
	buf := make([]byte, 16)
	io.ReadFull(nc, buf)
	nc.Write(perftestVersion())
	for range 2 {
		io.ReadFull(nc, buf[:4])
		nc.Write([]byte{0, 0, 0x10, 0})
	}
	io.ReadFull(nc, buf[:2])
	nc.Write([]byte("3\x00"))
}

func dialHandshake(t *testing.T, addr string, timeout time.Duration, p Params) (*Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_, err = c.Handshake(ctx, p)
	return c, err
}

func TestDialRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err = Dial(ctx, addr)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("got %v, want ErrRefused naming %s", err, addr)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v", d)
	}
	t.Log(err)
}

func TestPeerClosesMidHandshake(t *testing.T) {
	addr := fakePeer(t, func(nc net.Conn) {
		io.ReadFull(nc, make([]byte, 16))
		nc.Write(perftestVersion())
		io.ReadFull(nc, make([]byte, 2)) // half of cycle_buffer, then gone
	})
	_, err := dialHandshake(t, addr, 5*time.Second, Params{Test: Test{Name: WriteBW}})
	if !errors.Is(err, ErrPeerClosed) || !strings.Contains(err.Error(), "check_sys_data") {
		t.Fatalf("got %v, want ErrPeerClosed in check_sys_data", err)
	}
	t.Log(err)
}

func TestGarbage(t *testing.T) {
	addr := fakePeer(t, func(nc net.Conn) {
		io.ReadFull(nc, make([]byte, 16))
		nc.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
	})
	_, err := dialHandshake(t, addr, 5*time.Second, Params{Test: Test{Name: WriteBW}})
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "not a perftest version") {
		t.Fatalf("got %v, want ErrProtocol", err)
	}
	t.Log(err)
}

func TestGarbageDest(t *testing.T) {
	addr := fakePeer(t, func(nc net.Conn) {
		handshakeAsPerftest(nc)
		io.ReadFull(nc, make([]byte, keyMsgSizeGID))
		nc.Write(bytes.Repeat([]byte("z"), keyMsgSizeGID))
		io.Copy(io.Discard, nc)
	})
	c, err := dialHandshake(t, addr, 5*time.Second, Params{Test: Test{Name: WriteBW}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.ExchangeDests(ctx, []Dest{{QPN: 1}})
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "ctx_hand_shake") {
		t.Fatalf("got %v, want ErrProtocol in ctx_hand_shake", err)
	}
	t.Log(err)
}

func TestOldVersion(t *testing.T) {
	addr := fakePeer(t, func(nc net.Conn) {
		io.ReadFull(nc, make([]byte, 16))
		nc.Write([]byte("5.60\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
		io.Copy(io.Discard, nc)
	})
	_, err := dialHandshake(t, addr, 5*time.Second, Params{Test: Test{Name: WriteBW}})
	if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), `"5.60"`) {
		t.Fatalf("got %v, want ErrVersion naming 5.60", err)
	}
	t.Log(err)
}

func TestNeverAnswers(t *testing.T) {
	addr := fakePeer(t, func(nc net.Conn) { io.Copy(io.Discard, nc) })
	start := time.Now()
	_, err := dialHandshake(t, addr, 300*time.Millisecond, Params{Test: Test{Name: WriteBW}})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "exchange_versions") {
		t.Fatalf("got %v, want DeadlineExceeded in exchange_versions", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v for a 300ms deadline", d)
	}
	t.Log(err)
}

func TestCancel(t *testing.T) {
	addr := fakePeer(t, func(nc net.Conn) { io.Copy(io.Discard, nc) })
	ctx, cancel := context.WithCancel(context.Background())
	c, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err = c.Handshake(ctx, Params{Test: Test{Name: WriteBW}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestAcceptDeadline(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := ln.Accept(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
}

// A perftest peer without GIDs (InfiniBand without -x) sends 59-byte dests;
// an end with GIDs must say so rather than wait for 108 bytes.
func TestDestFormatMismatch(t *testing.T) {
	addr := fakePeer(t, func(nc net.Conn) {
		handshakeAsPerftest(nc)
		io.ReadFull(nc, make([]byte, keyMsgSize)) // perftest reads its size only
		nc.Write([]byte("0001:0000:000200:200000:5e000000:00007e0000002000:00000000\x00"))
		io.Copy(io.Discard, nc)
	})
	c, err := dialHandshake(t, addr, 5*time.Second, Params{Test: Test{Name: WriteBW}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.ExchangeDests(ctx, []Dest{{QPN: 1}})
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "without a GID") {
		t.Fatalf("got %v, want a GID format mismatch", err)
	}
	t.Log(err)
}

// Against a perftest server with one QP, an end with two sees the server's
// next message (its second round) as QP 1: the same QPN twice.
func TestQPCountMismatch(t *testing.T) {
	key := []byte("0000:0010:000200:200000:5e000000:00007e0000002000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:00:00:02:00000000:\x00")
	addr := fakePeer(t, func(nc net.Conn) {
		handshakeAsPerftest(nc)
		for { // perftest does not look at what it reads
			if _, err := io.ReadFull(nc, make([]byte, len(key))); err != nil {
				return
			}
			nc.Write(key)
		}
	})
	c, err := dialHandshake(t, addr, 5*time.Second, Params{Test: Test{Name: WriteBW, QPs: 2}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.ExchangeDests(ctx, []Dest{testDest(true, 0, true), testDest(true, 1, true)})
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "fewer QPs") {
		t.Fatalf("got %v, want a QP count mismatch", err)
	}
	t.Log(err)
}

// A latency test against a bandwidth test: the report is "done".
func TestDoneInsteadOfReport(t *testing.T) {
	addr := fakePeer(t, func(nc net.Conn) {
		handshakeAsPerftest(nc)
		key := []byte("0000:0010:000200:200000:5e000000:00007e0000002000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:00:00:02:00000000:\x00")
		for range 4 { // round 1, round 2, after RTR, end-of-test sync
			io.ReadFull(nc, make([]byte, len(key)))
			nc.Write(key)
		}
		io.ReadFull(nc, make([]byte, 8))
		nc.Write([]byte("done\x00\x00\x00\x00"))
		io.Copy(io.Discard, nc)
	})
	c, err := dialHandshake(t, addr, 5*time.Second, Params{Test: Test{Name: WriteBW}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.ExchangeDests(ctx, []Dest{testDest(true, 0, true)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = c.Finish(ctx, clientReport)
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), `"done"`) {
		t.Fatalf("got %v, want done-instead-of-report", err)
	}
	t.Log(err)
}

func TestOrderAndInvalid(t *testing.T) {
	c, _ := pair(t)
	ctx := context.Background()
	if _, err := c.ExchangeDests(ctx, []Dest{{}}); !errors.Is(err, ErrState) {
		t.Errorf("ExchangeDests first: %v", err)
	}
	if err := c.Sync(ctx); !errors.Is(err, ErrState) {
		t.Errorf("Sync first: %v", err)
	}
	if _, err := c.Handshake(ctx, Params{Test: Test{Name: "write_bww"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown test: %v", err)
	}
	if _, err := c.Handshake(ctx, Params{MTU: 1500, Test: Test{Name: WriteBW}}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "MTU 1500") {
		t.Errorf("MTU 1500: %v", err)
	}
	for _, d := range []Dest{{QPN: 1 << 24}, {PSN: 1 << 24}, {OutReads: 1 << 16}} {
		if _, err := appendDest(nil, d, true); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", d, err)
		}
	}
}
