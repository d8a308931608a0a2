package verbs_test

import (
	"testing"

	"github.com/ibex-rdma/ibex/verbs"
)

// TestQPNsUnpredictable: QP numbers and starting PSNs are random 24-bit
// numbers: QPNs never 0 or 1, distinct among live QPs, and neither they
// nor the PSNs follow one another (a linear counter told an attacker the
// next QPN). A number is free again once its QP is destroyed.
func TestQPNsUnpredictable(t *testing.T) {
	ctx, err := verbs.Open("loop0")
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Dealloc()
	cq, err := ctx.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Destroy()
	const n = 64
	qps := make([]*verbs.QP, 0, n)
	defer func() {
		for _, qp := range qps {
			if err := qp.Destroy(); err != nil {
				t.Error(err)
			}
		}
	}()
	seen := map[uint32]bool{}
	steps, psnSteps := map[int64]int{}, map[int64]int{}
	var prev, prevPSN uint32
	for i := range n {
		qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
		if err != nil {
			t.Fatal(err)
		}
		qps = append(qps, qp)
		num, psn := qp.Num(), qp.InitialPSN()
		if num < 2 || num > 0xffffff || psn > 0xffffff {
			t.Fatalf("qp %d: qpn %#x, psn %#x: want qpn in 2..0xffffff, psn 24 bits", i, num, psn)
		}
		if seen[num] {
			t.Fatalf("qp %d: qpn %#x given twice to live QPs", i, num)
		}
		seen[num] = true
		if i > 0 {
			steps[int64(num)-int64(prev)]++
			psnSteps[int64(psn)-int64(prevPSN)]++
		}
		prev, prevPSN = num, psn
	}
	// 63 differences of random 24-bit numbers: a repeated one has a
	// chance of about 63²/2/2^25, 1 in 17,000; a counter repeats every one.
	for d, k := range steps {
		if k > 2 {
			t.Errorf("%d of %d consecutive QPNs differ by %d: predictable", k, n-1, d)
		}
	}
	for d, k := range psnSteps {
		if k > 2 {
			t.Errorf("%d of %d consecutive starting PSNs differ by %d: predictable", k, n-1, d)
		}
	}
}
