package perf

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestColumnsArePerftests(t *testing.T) {
	var b bytes.Buffer
	writeColumns(&b, WriteBW, false)
	if got := strings.Fields(b.String()); strings.Join(got, " ") != "#bytes #iterations BW peak[MiB/sec] BW average[MiB/sec] MsgRate[Mpps]" {
		t.Errorf("bandwidth columns: %q", b.String())
	}
	b.Reset()
	writeColumns(&b, ReadBW, true)
	if !strings.Contains(b.String(), "BW peak[Gb/sec]    BW average[Gb/sec]") {
		t.Errorf("--report_gbits columns: %q", b.String())
	}
	b.Reset()
	writeColumns(&b, SendLat, false)
	want := "#bytes #iterations t_min[usec] t_max[usec] t_typical[usec] t_avg[usec] t_stdev[usec] 99% percentile[usec] 99.9% percentile[usec]"
	if got := strings.Join(strings.Fields(b.String()), " "); got != want {
		t.Errorf("latency columns:\n%q\nwant\n%q", got, want)
	}
}

func TestBWResult(t *testing.T) {
	// 1000 messages of 1 MiB in one second, evenly: 1000 MiB/s, 0.001 Mpps.
	var marks []mark
	for i := 1; i <= 10; i++ {
		marks = append(marks, mark{ops: 100 * i, ns: int64(i) * int64(100*time.Millisecond)})
	}
	r := bwResult(WriteBW, 1<<20, 1000, int64(time.Second), marks, false)
	if r.BWAvg < 999.9 || r.BWAvg > 1000.1 || r.MsgRate < 0.000999 || r.MsgRate > 0.001001 {
		t.Fatalf("even run: %+v", r)
	}
	if r.BWPeak < r.BWAvg || r.BWPeak > 1000.1 {
		t.Fatalf("peak of an even run: %+v", r)
	}
	// A burst: the first 500 in 0.1 s. The peak sees it, the average not.
	marks = []mark{{100, 20e6}, {300, 60e6}, {500, 100e6}, {750, 550e6}, {1000, 1e9}}
	r = bwResult(WriteBW, 1<<20, 1000, 1e9, marks, false)
	if r.BWPeak < 4900 || r.BWAvg > 1000.1 {
		t.Fatalf("burst: %+v", r)
	}
	g := bwResult(WriteBW, 1<<20, 1000, 1e9, nil, true)
	if g.BWAvg < 8.38 || g.BWAvg > 8.39 || g.Unit != "Gb/sec" {
		t.Fatalf("Gb/sec: %+v", g)
	}
}

func TestLatResult(t *testing.T) {
	var s []int64
	for i := 1; i <= 1000; i++ {
		s = append(s, int64(i)*1000) // 1..1000 µs
	}
	r := latResult(WriteLat, 2, s)
	if r.TMin != 1 || r.TMax != 1000 || r.TTypical != 501 || r.TAvg != 500.5 || r.P99 != 991 || r.P999 != 1000 || r.Iters != 1000 {
		t.Fatalf("%+v", r)
	}
	if r.TStdev < 288 || r.TStdev > 289 {
		t.Fatalf("stdev %v", r.TStdev)
	}
}

func TestConfigErrorsNameTheFlag(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Test: WriteBW, Size: -1}, "-s -1"},
		{Config{Test: AtomicBW, Size: 64}, "-s 64"},
		{Config{Test: WriteBW, Iters: 1}, "-n 1"},
		{Config{Test: WriteBW, QPs: 5000}, "-q 5000"},
		{Config{Test: WriteLat, QPs: 2}, "-q 2"},
		{Config{Test: WriteBW, TxDepth: -3}, "-t -3"},
		{Config{Test: WriteBW, Port: 70000}, "-p 70000"},
	} {
		if _, err := c.cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %q", c.cfg, err, c.want)
		}
	}
	c, err := Config{Test: ReadLat}.withDefaults()
	if err != nil || c.Size != 2 || c.Iters != 1000 || c.TxDepth != 1 || c.Port != 18515 {
		t.Fatalf("latency defaults: %+v %v", c, err)
	}
	c, _ = Config{Test: SendBW, All: true}.withDefaults()
	if s := c.sizes(); len(s) != 23 || s[0] != 2 || s[22] != 8<<20 {
		t.Fatalf("-a sizes %v", s)
	}
	if _, err := ParseTest("ib_atomic_lat"); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseTest("write_bandwidth"); err == nil || !strings.Contains(err.Error(), "write_bw") {
		t.Fatalf("unknown test error %v", err)
	}
}
