package coll

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
)

// TestChooseByModel: the model decides. A latency-bound model picks a
// short schedule (rd or tree: log n steps) for 8 bytes over 8 ranks and
// the ring (or rhd: bandwidth-optimal) for 64 MiB; every rank picks the
// same, because every rank uses rank 0's model.
func TestChooseByModel(t *testing.T) {
	m := Model{Transports: map[string]LinkModel{"loop0": {AlphaUs: 50, BetaNs: 1}}, GammaNs: 0.1, Source: "test"}
	picks := make([]string, 8)
	runRanks(t, 8, Options{Transport: "loop0", Landing: 8 * 4096, Credits: 8, Model: &m}, func(c *Comm) error {
		if got := c.Model(); got.Source != "test" {
			return fmt.Errorf("rank %d uses model %q, want rank 0's", c.rank, got.Source)
		}
		small := c.choose(algo.AllReduce, 2, 4)
		large := c.choose(algo.AllReduce, 16<<20, 4)
		if small != algo.RecDoubling && small != algo.Tree {
			return fmt.Errorf("8-byte all_reduce on 8 ranks: %v, want a log-depth algorithm", small)
		}
		if large != algo.Ring && large != algo.RecHalvingDoubling {
			return fmt.Errorf("64 MiB all_reduce on 8 ranks: %v, want a bandwidth-optimal algorithm", large)
		}
		if a2a := c.choose(algo.AllToAll, 100, 4); a2a != algo.Direct {
			return fmt.Errorf("all_to_all: %v", a2a)
		}
		picks[c.rank] = fmt.Sprint(small, large)
		return nil
	})
	for r, p := range picks {
		if p != picks[0] {
			t.Fatalf("rank %d chose %s, rank 0 %s", r, p, picks[0])
		}
	}
}

// TestCalibrate measures a model on three ranks of loop0, and every rank
// ends up with rank 0's; it survives a round trip through a file.
func TestCalibrate(t *testing.T) {
	models := make([]Model, 3)
	runRanks(t, 3, Options{Transport: "loop0"}, func(c *Comm) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		m, err := c.Calibrate(ctx)
		if err != nil {
			return err
		}
		models[c.rank] = m
		// Calls still work, and choose by the new model.
		buf := make([]byte, 4*100)
		return c.AllReduce(ctx, buf, buf, 100, reduce.Float32, reduce.Sum)
	})
	l, ok := models[0].Transports["loop0"]
	if !ok || l.AlphaUs <= 0 || len(models[0].Transports) != 1 || models[0].GammaNs <= 0 || !strings.HasPrefix(models[0].Source, "calibrated") {
		t.Fatalf("model %+v: want loop0 alone, α > 0, γ > 0", models[0])
	}
	for r, m := range models {
		if m.String() != models[0].String() {
			t.Fatalf("rank %d has model\n%s, rank 0\n%s", r, m, models[0])
		}
	}
	path := filepath.Join(t.TempDir(), "model.json")
	if err := models[0].Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := LoadModel(path)
	if err != nil || back.String() != models[0].String() {
		t.Fatalf("reloaded %v, %v", back, err)
	}
	t.Logf("\n%s", back)
}

func TestModelBadInput(t *testing.T) {
	for _, in := range []string{`{`, `{"transports":{}}`, `{"transports":{"shm0":{"alpha_us":-1}}}`, `{"transports":{"shm0":{}},"gamma_ns_per_byte":-2}`} {
		if _, err := parseModel([]byte(in), "test"); err == nil || !strings.Contains(err.Error(), "cost model test") {
			t.Errorf("%s: error %v", in, err)
		}
	}
}
