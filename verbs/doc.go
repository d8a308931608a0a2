// Package verbs is ibex's RDMA verbs API: devices, protection domains, memory
// regions, completion queues and reliable-connection queue pairs, with the
// semantics of libibverbs.
//
// A program opens a device by name (Open), allocates a PD, registers memory
// (PD.RegMR), creates CQs and QPs, moves each QP through
// RESET → INIT → RTR → RTS with QP.Modify (or QP.Connect for the usual
// attributes), exchanges ConnInfo out of band, posts work requests and polls
// completions:
//
//	ctx, _ := verbs.Open("loop0")
//	pd, _ := ctx.AllocPD()
//	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
//	cq, _ := ctx.CreateCQ(256)
//	qp, _ := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64}})
//	_ = qp.Connect(peerInfo, verbs.ConnectOptions{})
//	_ = qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRRDMAWrite, ...}})
//	n, _ := cq.Poll(wcs)
//
// Control-path failures are errors that wrap the sentinels in errors.go and
// name what was wrong where. Data-path outcomes are completion statuses (WC),
// never errors: an error completion moves the QP to ERR and flushes what is
// still queued with WCWRFlushErr, as InfiniBand specifies.
//
// The object model, the QP state machine, the queues, completion and flush
// rules, key checks and the responder rules live here, shared by every
// provider; a provider (provider/loopback, ...) supplies only the transport.
// What a provider implements, and the hooks it is given, are package
// verbs/driver: nothing in this package lets an application complete, fail
// or reach into a QP the way its transport does.
package verbs
