// Package driver is the provider contract of ibex's verbs: what a provider
// implements, and the handles through which verbs gives it the QPs, PDs,
// MRs and contexts it serves. It is to package verbs what rdma-core's
// driver.h is to verbs.h: an application imports verbs and never needs
// this package; a provider imports both.
//
// # What a provider implements
//
// A Provider is a family of devices; it registers itself from an init
// function with Register. Opening a device gives a Device; creating a QP
// on it gives a QPDriver. The required interfaces are small:
//
//   - Provider: Name, Devices, Open.
//   - Device: DeviceAttr (including DeviceAttr.Caps, the guarantees
//     programs decide by), PortAttr, NewQP, Close.
//   - QPDriver: Destroy, plus exactly one of
//     Executor (Execute runs the request at the head of the send queue in
//     the poster's goroutine and returns its Outcome; verbs counts RNR and
//     timeout retries), or
//     Issuer (Issue hands over each request in posting order; the transport
//     copies it with SendWQE.CopyTo and reports each completion, in order,
//     with QP.CompleteSend). verbs refuses a QPDriver that has both or
//     neither, naming the provider.
//
// The optional interfaces (optional.go) are found by type assertion:
// a Device may be a MemAllocator, MRPublisher, PortCounterReader or
// Progresser (and Idler); a QPDriver may be a StateNotifier or RecvNotifier.
//
// # What verbs does for every provider
//
// The object model, resource limits, the QP state machine, the queues,
// completion order, flushes, retry counting, key checks and the responder
// rules live in verbs once. A provider moves bytes and reports outcomes;
// it calls back through the handles: QP.CompleteSend, QP.Fail,
// QP.RecvBegin/RecvPlace/RecvComplete, QP.AddStats, PD.RemoteCheck/
// RemoteWrite/RemoteRead/RemoteAtomic, MR.Pin/Unpin/Slice,
// Context.PostEvent, and ExecuteLocal for a responder in the same address
// space. Call them with no lock of your own held that the QP's completion
// path could need.
package driver
