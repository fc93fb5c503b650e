// Package matrix runs the compatibility matrix: device plugin {hami-v2.10, current} × libvgpu.so
// {hami-v2.10, current} × limitDelivery {env, file} × every launch method, and judges each cell
// by three checks: a 4096 MiB allocation under a 3000 MiB limit is refused, gpuinfo reports 3000
// MiB total, and the process joined the pod's usage.cache. Expectations come from the design's
// "Compatibility" and "Failure behavior" sections (testdata/matrix/expected.json).
package matrix

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/limitbed/limitbed/plugin/launch"
)

// Versions of the plugin and of the core, and delivery modes, in table order.
var (
	Plugins    = []string{"hami-v2.10", "current"}
	Cores      = []string{"hami-v2.10", "current"}
	Deliveries = []string{"env", "file"}
)

// Combo is one container of the matrix: a plugin, a core and a delivery mode.
type Combo struct {
	Plugin   string `json:"plugin"`
	Core     string `json:"core"`
	Delivery string `json:"delivery"`
}

func (c Combo) String() string {
	return "plugin=" + c.Plugin + " core=" + c.Core + " delivery=" + c.Delivery
}

// Label is the short column heading.
func (c Combo) Label() string { return short(c.Plugin) + " / " + short(c.Core) + " / " + c.Delivery }

func short(v string) string {
	if v == "hami-v2.10" {
		return "v2.10"
	}
	return v
}

// Combos lists the 8 combinations in table order.
func Combos() []Combo {
	var out []Combo
	for _, p := range Plugins {
		for _, c := range Cores {
			for _, d := range Deliveries {
				out = append(out, Combo{Plugin: p, Core: c, Delivery: d})
			}
		}
	}
	return out
}

// Expectation is the design's verdict for one cell.
type Expectation struct {
	Combo
	Method   string `json:"method"`
	KeepsEnv bool   `json:"keeps_env"`
	Enforced bool   `json:"enforced"`
	Why      string `json:"why"`
}

// Expected is the content of testdata/matrix/expected.json.
type Expected struct {
	Comment string        `json:"comment"`
	Cells   []Expectation `json:"cells"`
}

// Derive computes the expectations from the design. Compatibility: "Environment variables stay
// injected in file mode, so no combination regresses … Only a new plugin in file mode with a new
// HAMi-core changes behaviour, and only for processes that had no limit before." A process that
// keeps the environment is enforced everywhere; one that loses it is enforced only with both new
// components in file mode.
func Derive(methods []launch.Method) Expected {
	exp := Expected{Comment: "Derived from the design (Compatibility, Failure behavior); regenerate with " +
		"LIMITBED_UPDATE=1 go test ./harness/matrix -run TestExpectedGolden"}
	for _, c := range Combos() {
		for _, m := range methods {
			e := Expectation{Combo: c, Method: m.Name, KeepsEnv: m.KeepsEnv}
			e.Enforced, e.Why = judge(c, m.KeepsEnv)
			exp.Cells = append(exp.Cells, e)
		}
	}
	return exp
}

func judge(c Combo, keepsEnv bool) (bool, string) {
	switch {
	case keepsEnv:
		return true, "keeps the container environment: every plugin injects the variables and every core reads them"
	case c.Plugin == "hami-v2.10":
		return false, "a v2.10 plugin delivers by environment only; a fresh login environment has no limit"
	case c.Delivery == "env":
		return false, "env mode writes no file; login sessions are not covered, by design (Failure behavior: env mode)"
	case c.Core == "hami-v2.10":
		return false, "a v2.10 core reads /overrideEnv only at NVML init, after the region was stamped unlimited (Compatibility)"
	default:
		return true, "the new plugin mounts /overrideEnv and the new core reads it before choosing the region"
	}
}

// Lookup returns the expectation for a cell.
func (e Expected) Lookup(c Combo, method string) (Expectation, bool) {
	for _, x := range e.Cells {
		if x.Combo == c && x.Method == method {
			return x, true
		}
	}
	return Expectation{}, false
}

// LoadExpected reads an expected.json.
func LoadExpected(path string) (Expected, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Expected{}, fmt.Errorf("read expectations: %w", err)
	}
	var e Expected
	if err := json.Unmarshal(data, &e); err != nil {
		return Expected{}, fmt.Errorf("parse expectations %s: %w", path, err)
	}
	if len(e.Cells) == 0 {
		return Expected{}, fmt.Errorf("expectations %s: no cells", path)
	}
	return e, nil
}

// MarshalExpected renders e as expected.json.
func MarshalExpected(e Expected) ([]byte, error) {
	data, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("render expectations: %w", err)
	}
	return append(data, '\n'), nil
}
