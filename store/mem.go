package store

import "unsafe"

// addrOf is the address of b's first byte (0 for an empty slice).
func addrOf(b []byte) uintptr {
	if cap(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}
