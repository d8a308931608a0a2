package fabric

import (
	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// PortStat is the traffic one port sent, and with RoCE what happened at
// its ingress. sim/flow fills Port, Name, Tier, Bytes, Util and Failed.
type PortStat struct {
	Port   topo.PortID
	Name   string // "leaf3:40 -> spine1:3"
	Tier   topo.LinkTier
	Bytes  int64 // on the wire, headers included
	Pkts   int64
	Util   float64  // busy time over the run's time
	Wait   des.Time // time with packets to send and no credit (PortXmitWait)
	Failed bool
	// MaxQueue is the most bytes ever queued at this (switch) port to send.
	MaxQueue int64

	// RoCE (zero with InfiniBand). PauseTime is the time this port was
	// paused by its peer (PFC) while it had packets of the paused
	// priority to send, summed over priorities, as ports count PFC pause
	// duration. PauseFrames are the PAUSE frames this port sent its peer
	// (its ingress went over Xoff; RESUMEs not counted). Drops are the
	// packets that arrived at this port to a full buffer. ECNMarks are
	// the packets this port marked CE as they left it; CNPs the CNPs
	// this NIC port sent for marked packets it received.
	PauseTime   des.Time
	PauseFrames int64
	Drops       int64
	ECNMarks    int64
	CNPs        int64
}
