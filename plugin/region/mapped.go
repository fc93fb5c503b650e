package region

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// The node monitor's writes to a limitbed region: the two header words of the `default` compute
// policy, in a header mapped shared with libvgpu.so (MAP_SHARED), swapped atomically as the
// library does on its side, so neither loses the other's store. The caller maps the header and
// guards the access against the file being truncated under the mapping (a fault).

// TakeRecentKernel swaps the header's recent_kernel back to 0 and reports whether a launch had
// set it. A swap, not a read then a clear: a launch between the two would be lost.
func TakeRecentKernel(header []byte) bool {
	return atomic.SwapUint32(headerWord(header, lbOffRecentKernel), 0) != 0
}

// SwapUtilSwitch stores want in the header's util_switch (1: throttle to the limit, 0: run
// free) and returns what was there.
func SwapUtilSwitch(header []byte, want uint32) uint32 {
	return atomic.SwapUint32(headerWord(header, lbOffUtilSwitch), want)
}

// headerWord is the 32-bit word at off of a mapped header. A header shorter than the layout's, or
// a word the mapping does not align, is a caller's bug: it panics rather than write elsewhere.
func headerWord(header []byte, off int) *uint32 {
	if len(header) < lbHeaderSize {
		panic(fmt.Sprintf("region: mapped header is %d bytes, want %d", len(header), lbHeaderSize))
	}
	p := unsafe.Pointer(&header[off])
	if uintptr(p)%4 != 0 {
		panic(fmt.Sprintf("region: header word at %d is not 4-byte aligned", off))
	}
	return (*uint32)(p)
}
