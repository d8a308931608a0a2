package driver

import "github.com/ibex-rdma/ibex/verbs"

// The optional provider interfaces, all in one place. verbs finds them by
// type assertion on the Device or the QPDriver; a provider implements only
// those it needs.

// MemAllocator is a Device that allocates memory its peers can map
// (verbs.PD.AllocMR); ordinary Go memory is used otherwise. free releases
// it; verbs calls it once, after Dereg.
type MemAllocator interface {
	AllocMem(n int) (buf []byte, free func(), err error)
}

// MRPublisher is a Device that must know every MR of its context, to
// publish it to peers that access memory without this process's CPU
// (shared memory).
type MRPublisher interface {
	// RegMR is called once the keys are assigned, before verbs.PD.RegMR
	// returns; an error fails the registration.
	RegMR(mr MR) error
	// DeregMR is called once the MR is dead (no new local access starts)
	// and returns only when no access by a peer is in flight.
	DeregMR(mr MR)
}

// PortCounterReader is a Device that keeps port counters
// (verbs.Context.PortCounters).
type PortCounterReader interface {
	PortCounters(port uint8) []verbs.PortCounter
}

// Progresser is a Device whose transport can make progress in the caller's
// goroutine (shared memory: serve the rings). verbs.CQ.Poll calls Progress
// when it finds the CQ empty, so an application that polls drives the
// transport itself instead of waiting for the provider's goroutine.
type Progresser interface {
	Progress()
}

// Idler is a Progresser that hears when a goroutine stops polling: CQ.Wait
// calls Idle before it blocks, so the device's own goroutine, which may
// leave the device to its pollers for a while, takes over at once. It must
// not block.
type Idler interface {
	Idle()
}

// StateNotifier is a QPDriver that hears about state changes: RTR and RTS
// to start its engine, ERR and RESET to stop it. It is called after the
// change, with no verbs lock held, with the attributes in force after it;
// it must not block (a completion the transport reports can cause one).
type StateNotifier interface {
	StateChanged(from, to verbs.QPState, attr verbs.QPAttr)
}

// RecvNotifier is a QPDriver that hears about posted receives (to grant
// its peer credits). RecvPosted is called after a PostRecv that added
// receives, with no verbs lock held; QP.RecvPosted gives the count.
type RecvNotifier interface {
	RecvPosted()
}
