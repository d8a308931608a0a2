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

// KeyAssigner is a Device whose MR keys are assigned outside this process
// (ibexd, which owns the transport and checks every access, as an HCA
// assigns keys in its firmware). AssignKeys is called before the MR is
// usable, with its memory, address and access set; verbs enters the keys
// in the process's table and refuses them if another MR holds them, then
// calls MRPublisher.DeregMR, which the device must implement to release
// them (it is also called at Dereg).
type KeyAssigner interface {
	AssignKeys(mr MR) (lkey, rkey uint32, err error)
}

// PortCounterReader is a Device that keeps port counters
// (verbs.Context.PortCounters).
type PortCounterReader interface {
	PortCounters(port uint8) []verbs.PortCounter
}

// PKeyTable is a Device whose ports have a P_Key table of their own
// (partitions): PKeys returns port's table, index by index, each entry a
// P_Key with bit 15 set for full membership. It must not change while the
// device is open. Without it a port's table is one entry, 0xffff (full
// member of the default partition). verbs.Context.QueryPKey reads it, and
// QP.Modify refuses a pkey_index beyond it.
type PKeyTable interface {
	PKeys(port uint8) []uint16
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

// RecvIssuer is a QPDriver whose transport keeps its own receive queue
// (a daemon that places incoming SENDs itself): IssueRecv is called for
// each receive PostRecv accepts, in order, with its receive sequence
// number (what QP.RecvComplete names it by) and its validated SGE list,
// under the QP's lock: it must not block. An error fails that receive's
// post (it is not queued).
type RecvIssuer interface {
	IssueRecv(rsn uint64, sgl []verbs.SGE) error
}

// ModifyNotifier is a QPDriver whose transport holds its own copy of the
// QP's attributes (a daemon's QP): Modified is called by QP.Modify once
// verbs has validated the change and before it is made, with the
// application's attr and mask, under the QP's lock; an error refuses the
// change and QP.Modify returns it. It may block for a bounded time (a
// round trip to the daemon with a deadline); transitions the transport
// causes (ERR) do not call it.
type ModifyNotifier interface {
	Modified(from, to verbs.QPState, attr *verbs.QPAttr, mask verbs.AttrMask) error
}

// QPNumberer is a QPDriver whose QP numbers are allocated outside this
// process (ibexd allocates them for every process on the host): verbs
// takes QPNum as the QP's number once NewQP returns.
type QPNumberer interface {
	QPNum() uint32
}

// StatsReader is a QPDriver whose transport keeps the QP's protocol
// counters in another process (a daemon's QP): verbs.QP.Stats adds
// TransportStats (all but Sends and Recvs, which verbs counts) to its own.
// It may block for a bounded time.
type StatsReader interface {
	TransportStats() verbs.QPStats
}

// RecvNotifier is a QPDriver that hears about posted receives (to grant
// its peer credits). RecvPosted is called after a PostRecv that added
// receives, with no verbs lock held; QP.RecvPosted gives the count.
type RecvNotifier interface {
	RecvPosted()
}

// Securer is a QPDriver whose transport can seal its connection (package
// psp: AES-GCM per connection, keys derived from a cluster master key and
// an SPI). RecvSPI is the SPI the QP receives sealed packets under, which
// verbs.QP.Info puts in ConnInfo.SPI (0: the QP does not encrypt); it is
// fixed for the QP's life. PeerSPI is called by verbs.QP.SetPeerSPI
// (Connect calls it before RTR) with the peer's SPI (0: the peer does not
// encrypt); the transport keeps it for the move to RTR and may refuse that
// move, through ModifyNotifier, if its policy requires encryption and the
// peer does not offer it. Neither may block.
type Securer interface {
	RecvSPI() uint32
	PeerSPI(spi uint32) error
}
