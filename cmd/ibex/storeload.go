package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/ibex-rdma/ibex/internal/units"
	"github.com/ibex-rdma/ibex/store/loader"
)

// storeLoadOptions are ibex store load's flags.
type storeLoadOptions struct {
	client                storeClientFlags // --server, --device, --mode, --connect-timeout (store.go)
	local, glob           string
	sampleSize            int64
	batch, ahead, readers int
	seed, epoch           uint64
	dropLast              bool
	compute               time.Duration
	spin                  bool
	batches               int
	search                bool
	searchBatches         int
	json                  bool
}

// newStoreLoadCmd is `ibex store load`: the loader's MLPerf Storage
// benchmark against a store server, or local files (the baseline).
func newStoreLoadCmd() *cobra.Command {
	var o storeLoadOptions
	cmd := &cobra.Command{
		Use:   "load (--server ADDR | --local DIR) --sample-size S [flags]",
		Short: "MLPerf Storage's benchmark of the prefetching loader: samples/s, accelerator utilisation (AU)",
		Long: "Read a dataset through store/loader as training would: samples of --sample-size bytes,\n" +
			"cut from every file (or those matching --glob), in the shuffled order of (--seed, --epoch),\n" +
			"--batch samples a batch, --ahead batches read ahead into buffers registered once.\n" +
			"A simulated accelerator computes for --compute after each batch (a sleep whose last\n" +
			"1.5 ms are spun, as Go's timers wake late; --spin: all spun). The run reports samples/s\n" +
			"and AU = compute time / wall time, the clock starting when the first batch has arrived\n" +
			"(MLPerf Storage excludes the first step's I/O); by default it runs one epoch\n" +
			"(--batches: that many batches instead).\n\n" +
			"--search then finds the highest samples/s that keeps AU >= 90%: bisection on the\n" +
			"compute time per batch from --compute (halved while AU >= 90%, doubled while below, then\n" +
			"the bracket bisected geometrically to within 5%), each point --search-batches batches\n" +
			"after --ahead+1 not counted; the answer is the highest samples/s measured at a point\n" +
			"with AU >= 90%, with its compute time as asked and as measured.\n\n" +
			"--server reads from an ibex store server (ibex store serve) over --device: --mode read,\n" +
			"the client RDMA READs the server's buffers; write, the server WRITEs into the loader's.\n" +
			"--local reads the files of a local directory with pread instead: the baseline row.\n" +
			"--json prints one JSON object (times in seconds: seconds, compute_per_batch,\n" +
			"compute_per_batch_at_max, measured_compute_per_batch_at_max).",
		Example: "  ibex store load --local /dev/shm/ds --sample-size 128K --batch 16 --compute 20ms --search\n" +
			"  ibex store load --server 10.0.0.1 --device udp0 --sample-size 128K --json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := runStoreLoad(cmd.Context(), o)
			if err != nil {
				return err
			}
			if o.json {
				b, err := json.MarshalIndent(rep, "", "  ")
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), string(b))
				return nil
			}
			rep.writeText(cmd.OutOrStdout())
			return nil
		},
	}
	f := cmd.Flags()
	// store.go's client flags, but for --server not required (--local
	// is the other source).
	f.StringVar(&o.client.server, "server", "", "the store server's host:port (port default 18520)")
	f.StringVarP(&o.client.device, "device", "d", "", "verbs device to reach --server on (default: the first)")
	f.StringVar(&o.client.mode, "mode", "read", "read (RDMA READ from the server's buffers) or write (the server WRITEs)")
	f.DurationVar(&o.client.timeout, "connect-timeout", 10*time.Second, "how long to wait for the server")
	f.StringVar(&o.local, "local", "", "read the files under `DIR` instead of a server (the baseline)")
	f.StringVar(&o.glob, "glob", "", "read only files whose name matches this pattern (path.Match, e.g. 'train/*.bin')")
	f.Var(bytesFlag{&o.sampleSize}, "sample-size", "bytes per sample (8, 64K, 1M, ...; required)")
	f.IntVarP(&o.batch, "batch", "b", loader.DefaultBatchSize, "samples per batch")
	f.IntVar(&o.ahead, "ahead", loader.DefaultAhead, "batches read ahead of the accelerator")
	f.IntVar(&o.readers, "readers", 0, "goroutines reading batches (0: --ahead)")
	f.Uint64Var(&o.seed, "seed", 0, "the shuffle's seed")
	f.Uint64Var(&o.epoch, "epoch", 0, "the first epoch (the shuffle of epoch e is a function of (seed, e))")
	f.BoolVar(&o.dropLast, "drop-last", false, "leave out an epoch's last batch if it is short")
	f.DurationVar(&o.compute, "compute", 20*time.Millisecond, "the simulated accelerator's compute time per batch")
	f.BoolVar(&o.spin, "spin", false, "busy-wait the compute time instead of sleeping")
	f.IntVar(&o.batches, "batches", 0, "batches to measure (0: one epoch)")
	f.BoolVar(&o.search, "search", false, "then search for the highest samples/s with AU >= 90%")
	f.IntVar(&o.searchBatches, "search-batches", 64, "batches measured at each point of --search")
	f.BoolVar(&o.json, "json", false, "print the report as JSON")
	return cmd
}

// storeLoadReport is what ibex store load prints.
type storeLoadReport struct {
	Source          string  `json:"source"`
	Shards          int     `json:"shards"`
	DatasetSamples  int     `json:"dataset_samples"`
	SampleSize      int     `json:"sample_size"`
	BatchSize       int     `json:"batch_size"`
	Ahead           int     `json:"ahead"`
	Readers         int     `json:"readers"`
	Seed            uint64  `json:"seed"`
	Epoch           uint64  `json:"epoch"`
	ComputePerBatch float64 `json:"compute_per_batch"`
	Spin            bool    `json:"spin"`

	SamplesPerSec  float64 `json:"samples_per_sec"`
	AU             float64 `json:"au"`
	Batches        int     `json:"batches"`
	Samples        int64   `json:"samples"`
	Bytes          int64   `json:"bytes"`
	Seconds        float64 `json:"seconds"`
	ComputeSeconds float64 `json:"compute_seconds"`

	// With --search.
	MaxSamplesPerSecAtAU90 *float64         `json:"max_samples_per_sec_at_au90,omitempty"`
	ComputePerBatchAtMax   *float64         `json:"compute_per_batch_at_max,omitempty"`
	MeasuredComputeAtMax   *float64         `json:"measured_compute_per_batch_at_max,omitempty"`
	SearchAtMinCompute     bool             `json:"search_at_min_compute,omitempty"`
	SearchMethod           string           `json:"search_method,omitempty"`
	SearchPoints           []storeLoadPoint `json:"search_points,omitempty"`
}

// storeLoadPoint is one point of --search.
type storeLoadPoint struct {
	ComputePerBatch float64 `json:"compute_per_batch"`
	// MeasuredCompute is the compute time per batch as it was (a little
	// more than asked).
	MeasuredCompute float64 `json:"measured_compute_per_batch"`
	SamplesPerSec   float64 `json:"samples_per_sec"`
	AU              float64 `json:"au"`
	Batches         int     `json:"batches"`
	Bytes           int64   `json:"bytes"`
	Seconds         float64 `json:"seconds"`
	Pass            bool    `json:"au_ok"`
}

// openStoreSource returns the Source o names and what closes it.
func openStoreSource(ctx context.Context, o storeLoadOptions) (loader.Source, string, func(), error) {
	switch {
	case o.local != "" && o.client.server != "":
		return nil, "", nil, errors.New("store load: --local and --server: give one")
	case o.local != "":
		src, err := loader.LocalSource(o.local)
		if err != nil {
			return nil, "", nil, err
		}
		return src, "local " + o.local, func() { src.Close() }, nil
	case o.client.server != "":
		c, err := o.client.dial(ctx)
		if err != nil {
			return nil, "", nil, fmt.Errorf("store load: --server %s: %w", o.client.server, err)
		}
		return c, fmt.Sprintf("server %s (%s mode)", o.client.server, c.Mode()), func() { c.Close() }, nil
	}
	return nil, "", nil, errors.New("store load: want --server ADDR or --local DIR")
}

func runStoreLoad(ctx context.Context, o storeLoadOptions) (*storeLoadReport, error) {
	ss := o.sampleSize
	if ss <= 0 || ss > 1<<31 {
		return nil, fmt.Errorf("store load: --sample-size %d: want a size in bytes from 1 to 2G, like 4096 or 128K (required)", ss)
	}
	if o.batch <= 0 || o.ahead <= 0 {
		return nil, fmt.Errorf("store load: --batch %d --ahead %d: want both > 0", o.batch, o.ahead)
	}
	src, name, closeSrc, err := openStoreSource(ctx, o)
	if err != nil {
		return nil, err
	}
	defer closeSrc()
	ds, err := loader.NewDataset(src.Files(), loader.DatasetConfig{SampleSize: int(ss), Glob: o.glob})
	if err != nil {
		return nil, fmt.Errorf("store load: %s: %w", name, err)
	}
	l, err := loader.New(loader.Config{
		Source: src, Dataset: ds, Seed: o.seed, Epoch: o.epoch, Epochs: -1,
		BatchSize: o.batch, Ahead: o.ahead, Readers: o.readers, DropLast: o.dropLast,
	})
	if err != nil {
		return nil, fmt.Errorf("store load: %w", err)
	}
	defer l.Close()
	cfg := l.Config()
	rep := &storeLoadReport{
		Source: name, Shards: len(ds.Shards()), DatasetSamples: ds.Len(), SampleSize: ds.SampleSize(),
		BatchSize: cfg.BatchSize, Ahead: cfg.Ahead, Readers: cfg.Readers, Seed: o.seed, Epoch: o.epoch,
		ComputePerBatch: o.compute.Seconds(), Spin: o.spin,
	}
	r, err := loader.Bench(ctx, l, loader.BenchConfig{Compute: o.compute, Spin: o.spin, Batches: o.batches})
	if err != nil {
		return nil, fmt.Errorf("store load: %w", err)
	}
	rep.SamplesPerSec, rep.AU, rep.Batches, rep.Samples = r.SamplesPerSec, r.AU, r.Batches, r.Samples
	rep.Bytes, rep.Seconds, rep.ComputeSeconds = r.Bytes, r.Seconds, r.ComputeSeconds
	if !o.search {
		return rep, nil
	}
	if o.compute <= 0 {
		return nil, errors.New("store load: --search: want --compute > 0, where the search starts")
	}
	sr, err := loader.SearchLoader(ctx, l, loader.SearchConfig{
		Bench: loader.BenchConfig{Compute: o.compute, Spin: o.spin, Batches: o.searchBatches},
	})
	if err != nil {
		return nil, fmt.Errorf("store load: %w", err)
	}
	rep.SearchMethod, rep.SearchAtMinCompute = loader.SearchMethod, sr.AtMin
	for _, p := range sr.Points {
		rep.SearchPoints = append(rep.SearchPoints, storeLoadPoint{
			ComputePerBatch: p.Compute.Seconds(), MeasuredCompute: p.Result.ComputeSeconds / float64(max(p.Result.Batches, 1)),
			SamplesPerSec: p.Result.SamplesPerSec, AU: p.Result.AU,
			Batches: p.Result.Batches, Bytes: p.Result.Bytes, Seconds: p.Result.Seconds, Pass: p.Pass,
		})
	}
	if sr.Found {
		rate, c := sr.MaxSamplesPerSec, sr.ComputePerBatch.Seconds()
		rep.MaxSamplesPerSecAtAU90, rep.ComputePerBatchAtMax = &rate, &c
		m := rep.SearchPoints[sr.Best].MeasuredCompute
		rep.MeasuredComputeAtMax = &m
	}
	return rep, nil
}

func (r *storeLoadReport) writeText(w io.Writer) {
	mib := func(b float64) float64 { return b / (1 << 20) }
	fmt.Fprintf(w, "ibex store load: %s: %d shards, %d samples of %s\n", r.Source, r.Shards, r.DatasetSamples, units.FormatBytes(int64(r.SampleSize)))
	mode := "sleep"
	if r.Spin {
		mode = "spin"
	}
	fmt.Fprintf(w, "batch %d, ahead %d, readers %d, seed %d, epoch %d, compute %v per batch (%s)\n",
		r.BatchSize, r.Ahead, r.Readers, r.Seed, r.Epoch, seconds(r.ComputePerBatch), mode)
	fmt.Fprintf(w, "run: %d batches, %d samples, %.1f MiB in %.3f s: %.0f samples/s, %.1f MiB/s, AU %.1f%%\n",
		r.Batches, r.Samples, mib(float64(r.Bytes)), r.Seconds, r.SamplesPerSec, mib(float64(r.Bytes))/max(r.Seconds, 1e-12), 100*r.AU)
	if r.SearchMethod == "" {
		return
	}
	fmt.Fprintf(w, "\nsearch for the highest samples/s with AU >= 90%%:\n")
	fmt.Fprintf(w, "  %14s %14s %14s %12s %8s\n", "compute/batch", "(measured)", "samples/s", "MiB/s", "AU")
	for _, p := range r.SearchPoints {
		pass := ""
		if p.Pass {
			pass = "  >= 90%"
		}
		fmt.Fprintf(w, "  %14v %14v %14.0f %12.1f %7.1f%%%s\n", seconds(p.ComputePerBatch), seconds(p.MeasuredCompute).Round(100*time.Nanosecond), p.SamplesPerSec,
			mib(float64(p.Bytes))/max(p.Seconds, 1e-12), 100*p.AU, pass)
	}
	if r.MaxSamplesPerSecAtAU90 == nil {
		fmt.Fprintf(w, "max samples/s at AU >= 90%%: none found (AU < 90%% at every compute time tried)\n")
	} else {
		fmt.Fprintf(w, "max samples/s at AU >= 90%%: %.0f (%.1f MiB/s), compute %v per batch", *r.MaxSamplesPerSecAtAU90,
			mib(*r.MaxSamplesPerSecAtAU90*float64(r.SampleSize)), seconds(*r.ComputePerBatchAtMax))
		if r.MeasuredComputeAtMax != nil {
			fmt.Fprintf(w, " (measured %v)", seconds(*r.MeasuredComputeAtMax).Round(100*time.Nanosecond))
		}
		fmt.Fprintln(w)
		if r.SearchAtMinCompute {
			fmt.Fprintf(w, "(the shortest compute time tried still kept AU >= 90%%: the source may be faster)\n")
		}
	}
	fmt.Fprintf(w, "method: %s\n", r.SearchMethod)
}

// seconds is s seconds as a Duration, for printing.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
