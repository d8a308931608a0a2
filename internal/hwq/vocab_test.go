package hwq_test

import (
	"testing"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/internal/hwq"
	"github.com/ibex-rdma/ibex/verbs"
)

// TestVerbsVocabulary: hwq's CQE numbers are verbs'; an SGE converts.
func TestVerbsVocabulary(t *testing.T) {
	b := make([]byte, hwq.CQESize)
	for _, op := range []verbs.WCOpcode{verbs.WCSend, verbs.WCRDMAWrite, verbs.WCRDMARead, verbs.WCCompSwap,
		verbs.WCFetchAdd, verbs.WCRecv, verbs.WCRecvRDMAWithImm} {
		e := hwq.CQE{Opcode: uint8(op), Flags: uint8(verbs.WCWithImm), Status: ib.WCGeneralErr}
		e.Encode(b)
		var got hwq.CQE
		if err := got.Decode(b); err != nil || got != e {
			t.Errorf("%v: %+v, %v", op, got, err)
		}
	}
	_ = verbs.SGE(hwq.SGE{Addr: 1, Length: 2, LKey: 3})
}
