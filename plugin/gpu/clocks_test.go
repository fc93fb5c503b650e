package gpu

import (
	"strings"
	"testing"

	"github.com/limitbed/limitbed/plugin/gpu/fakenvml"
)

// TestClocksFakegpu reads the SM clock from fakegpu's libnvidia-ml.so.1, which reports 1500 MHz
// at full load and FAKEGPU_POWER_BOOST's speed-up while idle (not parallel: the profile is chosen
// by environment).
func TestClocksFakegpu(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want uint32
	}{
		{"no power cap", nil, 1500},
		{"idle, boost 125", []string{"FAKEGPU_POWER_BOOST=125"}, 1875},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lib, _ := fakenvml.Setup(t, "2x-a16-16q", tc.env...)
			c := &Clocks{Lib: lib}
			defer c.Shutdown()
			for i := 0; i < 2; i++ { // the second read takes the cached handle
				got, err := c.SMClock(a16UUID1)
				if err != nil || got != tc.want {
					t.Fatalf("read %d: SMClock(%s) = %d, %v; want %d", i, a16UUID1, got, err, tc.want)
				}
			}
			if _, err := c.SMClock("GPU-00000000-0000-0000-0000-000000000000"); err == nil ||
				!strings.Contains(err.Error(), "GPU-00000000-0000-0000-0000-000000000000") {
				t.Fatalf("unknown GPU: %v, want an error naming it", err)
			}
		})
	}
}
