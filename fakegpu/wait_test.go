package fakegpu_test

import (
	"testing"
	"time"
)

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// eventually polls cond every 50 ms until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v (last: %s)", what, timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
