package kv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/kv"
	_ "github.com/ibex-rdma/ibex/provider/loopback"
	"github.com/ibex-rdma/ibex/verbs"
)

// startServer runs a server for the test's life.
func startServer(t testing.TB, cfg kv.ServerConfig) *kv.Server {
	t.Helper()
	if cfg.Index == 0 {
		cfg.Index = 4 << 20
	}
	if cfg.Values == 0 {
		cfg.Values = 16 << 20
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.130:0"
	}
	srv, err := kv.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv
}

func dial(t testing.TB, cfg kv.ClientConfig) *kv.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := kv.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestRoundTrip: PUT, GET, overwrite, DELETE over loop0, values from 0
// bytes to past the inline limit (the server READs those), a short
// buffer, a missing key, limits.
func TestRoundTrip(t *testing.T) {
	srv := startServer(t, kv.ServerConfig{Device: "loop0", MaxValue: 2 << 20})
	c := dial(t, kv.ClientConfig{Server: srv.Addr(), Device: "loop0"})
	ctx := testCtx(t)
	dst := make([]byte, 2<<20)
	for _, size := range []int{0, 1, 100, 4000, 4096, 4097, 20000, 1 << 20, 2 << 20} {
		key := []byte(fmt.Sprintf("key-%d", size))
		val := bytes.Repeat([]byte{byte(size)}, size)
		for i := range val {
			val[i] = byte(i*7 + size)
		}
		if err := c.Put(ctx, key, val); err != nil {
			t.Fatalf("put %d bytes: %v", size, err)
		}
		n, found, err := c.Get(ctx, key, dst)
		if err != nil || !found || n != size || !bytes.Equal(dst[:n], val) {
			t.Fatalf("get %d bytes: n %d found %v err %v", size, n, found, err)
		}
		// Overwrite, then the new value and never the old.
		val2 := append([]byte("v2:"), val...)
		if len(val2) > 2<<20 {
			val2 = val2[:2<<20]
		}
		if err := c.Put(ctx, key, val2); err != nil {
			t.Fatal(err)
		}
		n, found, err = c.Get(ctx, key, dst)
		if err != nil || !found || !bytes.Equal(dst[:n], val2) {
			t.Fatalf("get after overwrite (%d bytes): n %d found %v err %v", size, n, found, err)
		}
	}
	if _, found, err := c.Get(ctx, []byte("nope"), dst); err != nil || found {
		t.Fatalf("missing key: found %v err %v", found, err)
	}
	if found, err := c.Delete(ctx, []byte("key-100")); err != nil || !found {
		t.Fatalf("delete: %v %v", found, err)
	}
	if _, found, err := c.Get(ctx, []byte("key-100"), dst); err != nil || found {
		t.Fatalf("get after delete: found %v err %v", found, err)
	}
	if found, err := c.Delete(ctx, []byte("key-100")); err != nil || found {
		t.Fatalf("second delete: %v %v", found, err)
	}
	n, found, err := c.Get(ctx, []byte("key-4000"), dst[:10])
	if !errors.Is(err, io.ErrShortBuffer) || !found || n != 4003 {
		t.Fatalf("short buffer: n %d found %v err %v", n, found, err)
	}
	if err := c.Put(ctx, []byte("big"), make([]byte, 2<<20+1)); !errors.Is(err, kv.ErrTooLarge) {
		t.Fatalf("value past MaxValue: %v", err)
	}
	if err := c.Put(ctx, bytes.Repeat([]byte("k"), 1025), nil); !errors.Is(err, kv.ErrTooLarge) {
		t.Fatalf("key past MaxKey: %v", err)
	}
	st, err := c.ServerStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Puts != 18 || st.Deletes != 1 || st.Keys != 8 || st.RemoteReads == 0 {
		t.Fatalf("server stats %+v", st)
	}
	t.Logf("client %+v", c.Stats())
}

var _ = verbs.WCSuccess
