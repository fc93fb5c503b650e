package matrix

import (
	"fmt"
	"strings"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/plugin/launch"
)

// Uncovered checks, before anything starts, that backend b can run every cell of the given launch
// methods: a cell it could not run would be reported as skipped, and a matrix with skipped cells
// proves nothing about them. It returns nil, or an error naming the methods and what they lack.
func Uncovered(b sandbox.Backend, methods []launch.Method) error {
	var missing []string
	for _, m := range methods {
		for _, f := range m.Needs() {
			if !b.Supports(f) {
				missing = append(missing, fmt.Sprintf("%s (needs %s)", m.Name, f))
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("the %s backend cannot run the launch methods %s", b.Name(), strings.Join(missing, ", "))
}
