package kvload

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// OpKind is an operation's command.
type OpKind uint8

const (
	Get OpKind = iota
	Set
)

func (k OpKind) String() string {
	switch k {
	case Get:
		return "GET"
	case Set:
		return "SET"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Op is one operation. Key and Value belong to the caller and are valid only
// during the Do that carries them: a Client must not keep them.
type Op struct {
	Kind  OpKind
	Key   []byte
	Value []byte // Set: the value; Get: unused
}

// Result is one operation's outcome.
type Result struct {
	Found bool // Get: the key had a value; Set: true once stored
	Len   int  // Get: the value's length
}

// Client is one connection. Do sends ops as one pipeline (all are issued
// before any reply is awaited) and waits for every reply; res[i] is ops[i]'s
// result (len(res) >= len(ops)). Pipelining depth 1 is plain
// request/response. A Client is used by one goroutine at a time.
//
// A reply that is an error (the server refused the command) makes Do return
// an error that names the server and the command (a *ServerError); Do must
// honour ctx: it returns once ctx is done, with an error that wraps
// ctx.Err().
type Client interface {
	Do(ctx context.Context, ops []Op, res []Result) error
	Close() error
}

// Dialer opens one connection.
type Dialer func(ctx context.Context) (Client, error)

// Config is a run's shape. The zero value of every field is its documented
// default.
type Config struct {
	// Conns is the number of concurrent connections, each its own
	// goroutine (default 1).
	Conns int
	// Pipeline is the number of operations per Do (default 1).
	Pipeline int
	// Duration is the run's length (default 5s), unless Requests > 0.
	Duration time.Duration
	// Requests > 0 runs that many operations per connection instead of a
	// Duration (the last Do may carry fewer than Pipeline).
	Requests int
	// Keys is the key space: keys "key:%012d" for 0 <= n < Keys, chosen
	// uniformly at random (memtier's --key-pattern R:R) (default 10000).
	Keys int
	// ValueSize is the SET value's size in bytes (default 100).
	ValueSize int
	// GetRatio is the fraction of operations that are GETs (default 0.9;
	// memtier's default --ratio 1:10 is 10/11 = 0.909, pass 10.0/11 for
	// that); a negative value means none: SETs only.
	GetRatio float64
	// Preload SETs every key once, spread over the connections, before
	// the timed run.
	Preload bool
	// Seed drives the op mix and the key choice: connection i draws from
	// a PCG seeded with (Seed, i), so the same Seed gives the same
	// sequences. Zero is a seed like any other.
	Seed int64
}

// Defaults of Config's zero fields.
const (
	DefaultConns     = 1
	DefaultPipeline  = 1
	DefaultDuration  = 5 * time.Second
	DefaultKeys      = 10000
	DefaultValueSize = 100
	DefaultGetRatio  = 0.9
)

// ErrConfig is wrapped by every error about a bad Config field.
var ErrConfig = errors.New("kvload: bad config")

// withDefaults validates cfg and fills its zero fields; an error names the
// bad field.
func (cfg Config) withDefaults() (Config, error) {
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("%w: %s %v: %s", ErrConfig, field, v, why)
	}
	switch {
	case cfg.Conns < 0:
		return cfg, bad("Conns", cfg.Conns, "negative")
	case cfg.Pipeline < 0:
		return cfg, bad("Pipeline", cfg.Pipeline, "negative")
	case cfg.Duration < 0:
		return cfg, bad("Duration", cfg.Duration, "negative")
	case cfg.Requests < 0:
		return cfg, bad("Requests", cfg.Requests, "negative")
	case cfg.Keys < 0:
		return cfg, bad("Keys", cfg.Keys, "negative")
	case cfg.Keys > maxKeys:
		return cfg, bad("Keys", cfg.Keys, fmt.Sprintf("more than %d (12 digits)", maxKeys))
	case cfg.ValueSize < 0:
		return cfg, bad("ValueSize", cfg.ValueSize, "negative")
	case cfg.GetRatio > 1 || cfg.GetRatio != cfg.GetRatio:
		return cfg, bad("GetRatio", cfg.GetRatio, "not a fraction <= 1")
	}
	if cfg.Conns == 0 {
		cfg.Conns = DefaultConns
	}
	if cfg.Pipeline == 0 {
		cfg.Pipeline = DefaultPipeline
	}
	if cfg.Duration == 0 {
		cfg.Duration = DefaultDuration
	}
	if cfg.Keys == 0 {
		cfg.Keys = DefaultKeys
	}
	if cfg.ValueSize == 0 {
		cfg.ValueSize = DefaultValueSize
	}
	switch {
	case cfg.GetRatio == 0:
		cfg.GetRatio = DefaultGetRatio
	case cfg.GetRatio < 0:
		cfg.GetRatio = 0
	}
	return cfg, nil
}

// Report is a run's outcome. Latencies are per operation: a pipelined
// operation's latency is its Do's, from the first byte sent to the last
// reply read.
type Report struct {
	Ops, Gets, Sets, Misses uint64
	Elapsed                 time.Duration
	OpsPerSec               float64
	P50, P99, P999          time.Duration
}

func (r Report) String() string {
	return fmt.Sprintf("%d ops (%d gets, %d misses, %d sets) in %v: %.0f ops/s, p50 %v p99 %v p99.9 %v",
		r.Ops, r.Gets, r.Misses, r.Sets, r.Elapsed.Round(time.Millisecond), r.OpsPerSec, r.P50, r.P99, r.P999)
}
