// Package ib is the InfiniBand vocabulary that every layer of ibex shares,
// declared once: BTH opcodes and the headers each carries (IBA 9.2, Table
// 38), 24-bit PSN arithmetic, AETH syndromes, the RNR and ACK timer tables,
// and the numbers libibverbs gives completion statuses (ibv_wc_status),
// access flags (ibv_access_flags), send work-request opcodes
// (ibv_wr_opcode) and send flags (ibv_send_flags).
//
// wire encodes and decodes packets with these values, rc runs the protocol
// with them, and verbs re-exports the application-facing ones under their
// libibverbs names (verbs.WCStatus is ib.WCStatus). A value crosses from one
// layer to the next unchanged: there is no numeric cast between layers to
// get wrong. The package imports nothing of ibex.
package ib
