package psp

// windowBits is the anti-replay window: IVs this far below the highest
// seen are still accepted once. RFC 6479's layout: a ring of 64-bit words
// of which the one holding the highest IV is partly ahead of it, so the
// guaranteed window is windowBits-64 = 960 IVs.
const (
	windowWords = 16
	windowBits  = windowWords * 64
)

// Window is an IPsec-style anti-replay window over a receive SA's IVs
// (RFC 4303 3.4.3, RFC 6479's bitmap). The zero value has seen nothing.
type Window struct {
	top    uint64 // the highest IV accepted; 0: none
	bitmap [windowWords]uint64
}

// Check reports whether iv may be accepted: not 0, not seen, not too old.
// It changes nothing: call Accept once the packet authenticated.
func (w *Window) Check(iv uint64) error {
	switch {
	case iv == 0:
		return ErrReplay
	case iv > w.top:
		return nil
	case w.top-iv >= windowBits-64:
		return ErrReplay
	case w.bitmap[iv/64%windowWords]&(1<<(iv%64)) != 0:
		return ErrReplay
	}
	return nil
}

// Accept records iv (which Check allowed).
func (w *Window) Accept(iv uint64) {
	if iv > w.top {
		cur, idx := w.top/64, iv/64
		if idx-cur >= windowWords {
			w.bitmap = [windowWords]uint64{}
		} else {
			for i := cur + 1; i <= idx; i++ {
				w.bitmap[i%windowWords] = 0
			}
		}
		w.top = iv
	}
	w.bitmap[iv/64%windowWords] |= 1 << (iv % 64)
}
