package loader

import (
	"errors"
	"fmt"
	"math"
	"path"
	"sort"

	"github.com/ibex-rdma/ibex/store"
)

// ErrConfig is wrapped by every error about a Dataset's or Loader's
// configuration.
var ErrConfig = errors.New("bad configuration")

// DatasetConfig says which files are shards and how they are cut into
// samples.
type DatasetConfig struct {
	// SampleSize is the size of a sample in bytes (required): shard i holds
	// floor(Size/SampleSize) samples, back to back from offset 0; a tail
	// shorter than a sample is not read.
	SampleSize int
	// Glob keeps the files whose name matches it (path.Match, on the whole
	// slash-separated name: "train/*.bin"). Empty: every file.
	Glob string
}

// Shard is one file of a Dataset.
type Shard struct {
	File    int    // index in the Source's Files
	Name    string // the file's name
	Size    int64  // the file's size in bytes
	First   int    // the dataset index of its first sample
	Samples int    // how many samples it holds
}

// Dataset is a list of shards cut into fixed-size samples, numbered 0..Len()-1
// shard after shard, in file order.
type Dataset struct {
	sampleSize int
	shards     []Shard
	n          int
}

// MaxSamples is the most samples one Dataset holds: a Loader shuffles 32-bit
// sample numbers (4 bytes of memory per sample).
const MaxSamples = math.MaxUint32

// NewDataset makes the dataset of files (a Source's Files) under cfg. It
// checks everything at once: a sample size that is not positive, a bad glob,
// no file matching, a shard smaller than one sample (named).
func NewDataset(files []store.FileInfo, cfg DatasetConfig) (*Dataset, error) {
	if cfg.SampleSize <= 0 {
		return nil, fmt.Errorf("loader: dataset: SampleSize %d: %w: want > 0 bytes", cfg.SampleSize, ErrConfig)
	}
	if cfg.Glob != "" {
		if _, err := path.Match(cfg.Glob, ""); err != nil {
			return nil, fmt.Errorf("loader: dataset: Glob %q: %w: %v", cfg.Glob, ErrConfig, err)
		}
	}
	d := &Dataset{sampleSize: cfg.SampleSize}
	for i, f := range files {
		if cfg.Glob != "" {
			if ok, _ := path.Match(cfg.Glob, f.Name); !ok {
				continue
			}
		}
		k := f.Size / int64(cfg.SampleSize)
		if k == 0 {
			return nil, fmt.Errorf("loader: dataset: shard %q: %d bytes, smaller than one sample (SampleSize %d): %w",
				f.Name, f.Size, cfg.SampleSize, ErrConfig)
		}
		if int64(d.n)+k > MaxSamples {
			return nil, fmt.Errorf("loader: dataset: shard %q: more than %d samples in all: %w", f.Name, int64(MaxSamples), ErrConfig)
		}
		d.shards = append(d.shards, Shard{File: i, Name: f.Name, Size: f.Size, First: d.n, Samples: int(k)})
		d.n += int(k)
	}
	if len(d.shards) == 0 {
		if cfg.Glob != "" {
			return nil, fmt.Errorf("loader: dataset: Glob %q: no file of %d matches: %w", cfg.Glob, len(files), ErrConfig)
		}
		return nil, fmt.Errorf("loader: dataset: no files: %w", ErrConfig)
	}
	return d, nil
}

// Len is the number of samples.
func (d *Dataset) Len() int { return d.n }

// SampleSize is the size of every sample in bytes.
func (d *Dataset) SampleSize() int { return d.sampleSize }

// Shards lists the shards in file order (do not modify).
func (d *Dataset) Shards() []Shard { return d.shards }

// Locate returns the shard (an index of Shards) holding sample i and the
// sample's extent. i must be in [0, Len()).
func (d *Dataset) Locate(i int) (shard int, e store.Extent) {
	s := sort.Search(len(d.shards), func(k int) bool { return d.shards[k].First > i }) - 1
	sh := &d.shards[s]
	return s, store.Extent{File: sh.File, Off: int64(i-sh.First) * int64(d.sampleSize), Len: d.sampleSize}
}
