package loader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	_ "github.com/ibex-rdma/ibex/provider/loopback" // loop0
	"github.com/ibex-rdma/ibex/store"
)

// TestStoreServer runs the loader against a real store server and client
// over loop0, in both of the client's modes: two epochs, every batch byte
// for byte the files', in Shuffle's order; then a shard truncated under
// the server fails with an error naming it and the offset.
func TestStoreServer(t *testing.T) {
	seed := testSeed(t)
	const ss = 3000 // not a divisor of the server's chunk: coalesced extents split unevenly
	dir, data := writeShards(t, seed, 40_000, 91_000, 3000, 250_017)
	srv, err := store.NewServer(store.ServerConfig{Dir: dir, Listen: "127.0.0.140:0", Device: "loop0",
		PoolBytes: 1 << 20, ChunkBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, mode := range []store.Mode{store.ModeRead, store.ModeWrite} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := store.Dial(ctx, store.ClientConfig{Server: srv.Addr().String(), Device: "loop0", Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			l := newTestLoader(t, c, ss, Config{Seed: seed, Epochs: 2, BatchSize: 16, Ahead: 3})
			defer l.Close() // before the client's Close
			perm := make([]uint32, l.ds.Len())
			for e := range 2 {
				run := drain(t, l, data)
				Shuffle(perm, seed, uint64(e))
				for i, p := range perm {
					if run.order[i] != int(p) {
						t.Fatalf("epoch %d: sample %d is %d, want %d", e, i, run.order[i], p)
					}
				}
			}
			t.Logf("%s mode: 2 epochs of %d samples of %d bytes, byte for byte", mode, l.ds.Len(), ss)
		})
	}
	t.Run("truncated", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := store.Dial(ctx, store.ClientConfig{Server: srv.Addr().String(), Device: "loop0"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		l := newTestLoader(t, c, ss, Config{Seed: seed, BatchSize: 4, Ahead: 2})
		defer l.Close()
		if err := os.Truncate(filepath.Join(dir, "shard-003.bin"), 100_000); err != nil {
			t.Fatal(err)
		}
		for err == nil {
			var b *Batch
			if b, err = l.Next(ctx); err == nil {
				b.Release()
			}
		}
		var re *ReadError
		if !errors.As(err, &re) || !errors.Is(err, store.ErrRange) || re.Shard != "shard-003.bin" || re.Off+int64(re.Len) <= 100_000 {
			t.Fatalf("reading a truncated shard: %v", err)
		}
		if !regexp.MustCompile(fmt.Sprintf(`shard "shard-003.bin" offset %d`, re.Off)).MatchString(err.Error()) {
			t.Fatalf("message %q does not name the shard and offset", err)
		}
		t.Log(err)
	})
}
