package daemon

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// pinProcess sets the CPU affinity of every thread of the process to
// cores. Threads the Go runtime starts later inherit the mask of the
// thread that starts them, so the whole daemon (engines, the devices'
// progress loops, the control path) stays on its cores.
func pinProcess(cores []int) error {
	var set unix.CPUSet
	for _, c := range cores {
		set.Set(c)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("sched_setaffinity(thread %d): %w", tid, err)
		}
	}
	return nil
}
