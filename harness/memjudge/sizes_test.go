package memjudge

import "testing"

// What the judge takes an allocation of each kind to charge and to hold, against what memload
// asks the driver for (memload_objs.c) and fakegpu's and the library's sizes of it.
func TestSizes(t *testing.T) {
	for _, tc := range []struct {
		kind       string
		bytes      uint64
		lib, truth uint64
	}{
		{"mem", 3 * mib, 3 * mib, 4 * mib}, // the driver holds whole granules (2 MiB)
		{"mem", mib + 1, mib + 1, 2 * mib},
		{"array3d", 8 * mib, 8 * mib, 8 * mib},
		{"array3d", 6 * mib, 4 * mib, 4 * mib}, // whole layers of 4 MiB
		{"array3d", 2 * mib, 4 * mib, 4 * mib}, // depth 0: one layer (a 2D array)
		{"array3d1", 2 * mib, 4 * mib, 4 * mib},
		{"module", 3*mib + 5, 3*mib + 5, 3*mib + 5},
	} {
		lib, truth := sizes(tc.kind, tc.bytes, 0)
		if lib != tc.lib || truth != tc.truth {
			t.Errorf("sizes(%s, %d) = %d, %d; want %d, %d", tc.kind, tc.bytes, lib, truth, tc.lib, tc.truth)
		}
	}
}
