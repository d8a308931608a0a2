package verbs

import "strings"

// DeviceCap is a set of guarantees a device makes to the programs above it
// (DeviceAttr.Caps). ibverbs reports hardware capabilities as flags in
// ibv_device_attr; these are the ones ibex's software transports differ in,
// and what coll chooses its protocols and cost model by.
type DeviceCap uint32

// Device capabilities.
const (
	// CapSameHost: the device reaches QPs in other processes of this host
	// (the same machine and network namespace).
	CapSameHost DeviceCap = 1 << iota
	// CapOtherHosts: the device reaches QPs on other hosts.
	CapOtherHosts
	// CapOneSided: RDMA WRITE, READ and atomics complete without the
	// target's CPU taking part.
	CapOneSided
	// CapOrderedPlacement: the bytes of the RDMA WRITEs a QP posts land in
	// the target's memory in posting order, each WRITE's bytes in address
	// order and in whole 8-byte words, in memory (PD.AllocMR) that a CPU
	// polling it with atomic loads sees change as they land. A flag written
	// after its data is seen after the data. coll's LL and flagged paths
	// rest on this.
	CapOrderedPlacement
	// CapCompleteAtPost: a one-sided request completes as soon as the
	// initiator has moved its bytes, with no round trip to the target.
	CapCompleteAtPost
	// CapProgressThread: the device moves data on a goroutine of its own
	// (not the poster's), which needs a CPU: a program spinning on a CQ
	// should yield its thread, not only its goroutine.
	CapProgressThread
	// CapAllocatedMemory: RegMR takes only memory from Context.AllocBuf
	// (or PD.AllocMR): the device's transport runs in another process
	// (ibexd) and moves data straight from and into memory it maps.
	CapAllocatedMemory
)

var capNames = [...]string{"SAME_HOST", "OTHER_HOSTS", "ONE_SIDED", "ORDERED_PLACEMENT", "COMPLETE_AT_POST", "PROGRESS_THREAD", "ALLOCATED_MEMORY"}

// Has reports whether c has every capability of m.
func (c DeviceCap) Has(m DeviceCap) bool { return c&m == m }

// String lists the capabilities, e.g. "SAME_HOST|ONE_SIDED"; "none" for 0.
func (c DeviceCap) String() string {
	var parts []string
	for i, n := range capNames {
		if c&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}
