// Package rctest is a deterministic test bed for the rc engine and for
// anything that carries its packets: a seeded in-memory network with a
// virtual clock, a recording Host that checks the engine's side of the Host
// contract, and a simulation that runs two engines under a random workload
// and checks the outcome against a model.
//
// Three layers, each usable alone:
//
//   - Network and Endpoint carry datagrams (RoCEv2 UDP payloads: BTH
//     through ICRC) between addresses, applying the Faults of the
//     network: loss, duplication, delay and reordering, corruption,
//     partitions, and a Bottleneck link before each endpoint that queues
//     at a rate, drops on overflow and CE-marks above a threshold (RecvCE
//     reports the mark), all drawn from one seed. Endpoint's batch Send and Recv
//     have the shape of a UDP socket's sendmmsg and recvmmsg, and Notify
//     wakes a blocked receiver, so a provider that owns its transport can
//     run over the same faulty network. With Faults.Hold a script decides
//     what arrives (Deliver, Drop, Duplicate, Mark), and Tap shows every datagram
//     sent and what became of it.
//   - Host is an rc.Host over one flat memory. It logs completions and
//     flags every call the engine should not have made (a completion out of
//     order or twice, bytes outside a checked remote range or a request's
//     buffer, a receive placed with none current); Err returns the first.
//   - QP joins an rc.Conn, its Host and an Endpoint, encoding packets as a
//     UDP provider does (package wire, ICRC included), and Run drives two
//     of them to completion under a Config drawn from a seed (RandomConfig)
//     and checks the result: every request completed exactly once and in
//     order, the peer's memory equals the model, READs and atomics returned
//     the model's values (so atomics executed exactly once), receives
//     completed in order with the right lengths and immediates.
//
// Nothing here uses goroutines or the wall clock; a Network is safe for
// concurrent use so that a provider's own goroutines may share it.
package rctest
