package region

import (
	"encoding/binary"
	"testing"
	"unsafe"
)

// TestMonitorWords: the two words the monitor writes are the ones the decoder (and so the C
// layout, TestLayoutMatchesRegionH) calls recent_kernel and util_switch, and nothing else moves.
func TestMonitorWords(t *testing.T) {
	b := alignedHeader()
	binary.NativeEndian.PutUint64(b[lbOffMagic:], limitbedMagic)
	binary.NativeEndian.PutUint32(b[lbOffVersion:], limitbedVersion)
	binary.NativeEndian.PutUint32(b[lbOffRecentKernel:], 1)
	binary.NativeEndian.PutUint32(b[lbOffUtilSwitch:], 1)
	before := append([]byte(nil), b...)

	if !TakeRecentKernel(b) {
		t.Error("TakeRecentKernel missed a launch")
	}
	if TakeRecentKernel(b) {
		t.Error("TakeRecentKernel saw a launch twice")
	}
	if was := SwapUtilSwitch(b, 0); was != 1 {
		t.Errorf("SwapUtilSwitch returned %d, want the 1 that was there", was)
	}
	c, err := DecodeLimitbedCompute(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.RecentKernel != 0 || c.UtilSwitch != 0 {
		t.Errorf("decoded %+v after the writes, want recent_kernel 0 and util_switch 0", c)
	}
	for i := range b {
		if b[i] != before[i] && (i < lbOffRecentKernel || i >= lbOffRecentKernel+4) && (i < lbOffUtilSwitch || i >= lbOffUtilSwitch+4) {
			t.Errorf("byte %d changed: the monitor writes only its two words", i)
		}
	}
}

func TestShortHeaderPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("a short header was written")
		}
	}()
	SwapUtilSwitch(make([]byte, 64), 1)
}

// alignedHeader is a header-sized buffer aligned as a mapping is (a byte slice need not be).
func alignedHeader() []byte {
	words := make([]uint64, lbHeaderSize/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), lbHeaderSize)
}
