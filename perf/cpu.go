package perf

import (
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// CPU per byte: a bandwidth report says how much CPU this process spent
// moving the bytes, the figure to hold against the kernel's TCP (iperf3
// reports its CPU utilisation the same way: the process's user+sys time
// over the run). It counts every thread of the process, so a provider's
// progress goroutine is in it too; it is read with getrusage(RUSAGE_SELF)
// before and after the run of one size, setup and the exchanges with the
// peer outside it.

// cpuSpan is a CPU and wall-clock reading at the start of a run.
type cpuSpan struct {
	cpu, wall int64 // ns
}

// processCPU is this process's user+sys time so far, in ns; 0 if
// getrusage fails (it fails only on a bad argument).
func processCPU() int64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func startCPU() cpuSpan { return cpuSpan{cpu: processCPU(), wall: nanotime()} }

// used is the CPU and wall time since the start.
func (c cpuSpan) used() cpuUse {
	return cpuUse{cpu: processCPU() - c.cpu, wall: nanotime() - c.wall}
}

// cpuUse is the CPU (user+sys, every thread) and wall-clock time of one
// run, in ns.
type cpuUse struct {
	cpu, wall int64
}

// setCPU fills a bandwidth result's CPU figures from the run's use:
// seconds, seconds per GB (10^9 bytes, as iperf3's and most NIC vendors'
// GB) of the bytes moved (Bytes × Iters), and percent of one core.
func (r *Result) setCPU(u cpuUse) {
	if u.cpu <= 0 || u.wall <= 0 {
		return
	}
	r.CPUSeconds = float64(u.cpu) / 1e9
	r.CPUPercent = 100 * float64(u.cpu) / float64(u.wall)
	if moved := float64(r.Bytes) * float64(r.Iters); moved > 0 {
		r.CPUPerGB = r.CPUSeconds / (moved / 1e9)
	}
}

// writeCPU prints a result's CPU line, below the results table (the
// table keeps perftest's columns, which scripts parse).
func writeCPU(w io.Writer, r Result) {
	if r.CPUSeconds == 0 {
		return
	}
	fmt.Fprintf(w, " CPU[s/GB]       : %.4f\t%.1f%% of one core\t(#bytes %d, user+sys %.3f s of this process over %.3f s)\n",
		r.CPUPerGB, r.CPUPercent, r.Bytes, r.CPUSeconds, r.CPUSeconds*100/r.CPUPercent)
}
