package perf

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/ibex-rdma/ibex/perf/oob"
)

const rule = "---------------------------------------------------------------------------------------"

// headerInfo is what the banner block shows.
type headerInfo struct {
	test      Test
	device    string
	qps       int
	txDepth   int
	cqMod     int
	postList  int
	inline    int
	mtu       int
	linkLayer string
	events    bool
	local     []oob.Dest
	remote    []oob.Dest
}

// writeHeader prints perftest's banner block.
func writeHeader(w io.Writer, h headerInfo) {
	fmt.Fprintln(w, rule)
	fmt.Fprintf(w, "                    %s\n", h.test.title())
	if h.events {
		// perftest (ctx_print_test_info): the device's completion
		// vector, 0 without -X.
		fmt.Fprintf(w, " Test with events. Using %s_comp0\n", h.device)
	}
	fmt.Fprintf(w, " Dual-port       : OFF\t\tDevice         : %s\n", h.device)
	fmt.Fprintf(w, " Number of qps   : %d\t\tTransport type : IB\n", h.qps)
	fmt.Fprintf(w, " Connection type : RC\t\tUsing SRQ      : OFF\n")
	fmt.Fprintf(w, " PCIe relax order: OFF\n")
	fmt.Fprintf(w, " ibv_wr* API     : OFF\n")
	if !h.test.Latency() || h.test.verb() == "read" || h.test.verb() == "atomic" {
		fmt.Fprintf(w, " TX depth        : %d\n", h.txDepth)
	}
	if h.postList > 1 {
		fmt.Fprintf(w, " Post List       : %d\n", h.postList)
	}
	if !h.test.Latency() {
		fmt.Fprintf(w, " CQ Moderation   : %d\n", min(h.cqMod, h.txDepth))
	}
	fmt.Fprintf(w, " Mtu             : %d[B]\n", h.mtu)
	fmt.Fprintf(w, " Link type       : %s\n", h.linkLayer)
	fmt.Fprintf(w, " GID index       : 0\n")
	if h.test.verb() == "read" || h.test.verb() == "atomic" {
		fmt.Fprintf(w, " Outstand reads  : %d\n", outReads)
	}
	fmt.Fprintf(w, " Max inline data : %d[B]\n", h.inline)
	fmt.Fprintf(w, " rdma_cm QPs\t : OFF\n")
	fmt.Fprintf(w, " Data ex. method : Ethernet\n")
	fmt.Fprintln(w, rule)
	for i := range h.local {
		writeDest(w, "local", h.local[i])
		if i < len(h.remote) {
			writeDest(w, "remote", h.remote[i])
		}
	}
	fmt.Fprintln(w, rule)
}

func writeDest(w io.Writer, side string, d oob.Dest) {
	fmt.Fprintf(w, " %s address: LID %#04x QPN %#06x PSN %#06x RKey %#08x VAddr %#016x\n", side, d.LID, d.QPN, d.PSN, d.RKey, d.VAddr)
	parts := make([]string, 16)
	for i, b := range d.GID {
		parts[i] = fmt.Sprintf("%02d", b)
	}
	fmt.Fprintf(w, " GID: %s\n", strings.Join(parts, ":"))
}

// writeColumns prints the column header of the results table.
func writeColumns(w io.Writer, t Test, gbits bool) {
	if t.Latency() {
		fmt.Fprintln(w, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ")
		return
	}
	unit := "MiB/sec"
	if gbits {
		unit = "Gb/sec"
	}
	fmt.Fprintf(w, " #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]\n", unit, unit)
}

// writeResult prints one line of the table.
func writeResult(w io.Writer, t Test, r Result) {
	if t.Latency() {
		fmt.Fprintf(w, " %-7d %-10d     %-7.2f        %-7.2f      %-7.2f          %-7.2f          %-7.2f         %-7.2f                %-7.2f\n",
			r.Bytes, r.Iters, r.TMin, r.TMax, r.TTypical, r.TAvg, r.TStdev, r.P99, r.P999)
		return
	}
	fmt.Fprintf(w, " %-10d %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.Bytes, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
}

// bwResult computes a bandwidth line: the average over the whole run and
// the peak over the best window of at least a tenth of the run.
func bwResult(t Test, size, ops int, elapsedNs int64, marks []mark, gbits bool) Result {
	r := Result{Test: t.String(), Bytes: size, Iters: ops, Unit: "MiB/sec"}
	if gbits {
		r.Unit = "Gb/sec"
	}
	rate := func(bytes float64, ns int64) float64 {
		if ns <= 0 {
			return 0
		}
		if gbits {
			return bytes * 8 / float64(ns)
		}
		return bytes / (1 << 20) / (float64(ns) / 1e9)
	}
	r.BWAvg = rate(float64(size)*float64(ops), elapsedNs)
	if elapsedNs > 0 {
		r.MsgRate = float64(ops) / (float64(elapsedNs) / 1e9) / 1e6
	}
	r.BWPeak = r.BWAvg
	span := max(ops/10, 1)
	j := 0
	for i := range marks {
		for j < i && marks[i].ops-marks[j+1].ops >= span {
			j++
		}
		if d := marks[i].ops - marks[j].ops; d >= span {
			r.BWPeak = max(r.BWPeak, rate(float64(size)*float64(d), marks[i].ns-marks[j].ns))
		}
	}
	return r
}

// mark is a completion count at a time.
type mark struct {
	ops int
	ns  int64
}

// latResult computes a latency line from samples in nanoseconds.
func latResult(t Test, size int, samples []int64) Result {
	r := Result{Test: t.String(), Bytes: size, Iters: len(samples)}
	if len(samples) == 0 {
		return r
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	us := func(ns int64) float64 { return float64(ns) / 1e3 }
	var sum float64
	for _, v := range s {
		sum += float64(v)
	}
	mean := sum / float64(len(s))
	var sq float64
	for _, v := range s {
		sq += (float64(v) - mean) * (float64(v) - mean)
	}
	r.TMin, r.TMax, r.TTypical = us(s[0]), us(s[len(s)-1]), us(s[len(s)/2])
	r.TAvg, r.TStdev = mean/1e3, math.Sqrt(sq/float64(len(s)))/1e3
	r.P99 = us(s[min(len(s)-1, len(s)*99/100)])
	r.P999 = us(s[min(len(s)-1, len(s)*999/1000)])
	return r
}
