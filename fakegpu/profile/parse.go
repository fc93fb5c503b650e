package profile

import (
	"fmt"
	"strconv"
	"strings"
)

// block is where a key's value goes: the profile, its current device or the device's current MIG;
// other keeps the values of keys the Go structs have no field for (keys.go).
type block struct {
	p     *Profile
	d     *Device
	m     *MIG
	other map[string]string
}

var archs = []string{"kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper"}

// parser holds what fakegpu's parser tracks: the current block, the keys seen in each block and
// the line that opened each device and MIG block (0: not opened).
type parser struct {
	path  string
	p     *Profile
	line  int
	scope scope
	dev   int
	mig   int
	gseen uint64
	dseen [MaxDevices]uint64
	mseen [MaxDevices][MaxMIG]uint64
	other map[string]map[string]string // by block ("profile", "device D", "mig D.M"): block.other
	dline [MaxDevices]int
	mline [MaxDevices][MaxMIG]int
	devs  [MaxDevices]Device
	migs  [MaxDevices][MaxMIG]MIG
	nmig  [MaxDevices]int
	ndev  int
}

// cSpace is C's isspace in the "C" locale: the profile reader trims exactly these.
const cSpace = " \t\n\v\f\r"

func (ps *parser) parseLine(s string) error {
	s, _, _ = strings.Cut(s, "#")
	k, v, hasEq := strings.Cut(s, "=")
	k = strings.Trim(k, cSpace)
	if k == "" && !hasEq {
		return nil // blank or comment
	}
	if !hasEq || k == "" {
		return ps.fail(ps.line, "expected \"key = value\", got \"%s\"", k)
	}
	v = strings.Trim(v, cSpace)
	if k == "device" || k == "mig" {
		return ps.openBlock(k, v)
	}
	for i := range keys {
		kk := &keys[i]
		if kk.name != k {
			continue
		}
		if kk.scope != ps.scope {
			where := [...]string{"before the first \"device = N\" line", "after \"device = N\" (before its mig blocks)", "after \"mig = N\""}
			return ps.fail(ps.line, "key \"%s\" is misplaced: it belongs %s", k, where[kk.scope])
		}
		seen := &ps.gseen
		b := ps.block(ps.scope, ps.dev, ps.mig)
		switch ps.scope {
		case sDevice:
			seen = &ps.dseen[ps.dev]
		case sMIG:
			seen = &ps.mseen[ps.dev][ps.mig]
		}
		if *seen&(1<<i) != 0 {
			return ps.fail(ps.line, "key \"%s\" given twice in the same block: keep one", k)
		}
		*seen |= 1 << i
		return ps.setValue(kk, b, v)
	}
	known := make([]string, 0, len(keys))
	for _, kk := range keys {
		if kk.scope == ps.scope {
			known = append(known, kk.name)
		}
	}
	more := " device mig"
	if ps.scope == sGlobal {
		more = " device"
	}
	return ps.fail(ps.line, "unknown key \"%s\" (known: %s%s)", k, strings.Join(known, " "), more)
}

func (ps *parser) setValue(k *key, b *block, v string) error {
	switch k.kind {
	case tGPUUUID, tMIGUUID, tStr, tPCI:
		if k.kind == tGPUUUID || k.kind == tMIGUUID {
			pre := "GPU-"
			if k.kind == tMIGUUID {
				pre = "MIG-"
			}
			if !uuidOK(v, pre) {
				return ps.fail(ps.line, "%s: \"%s\" is not a UUID (write %sxxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, hex digits)", k.name, v, pre)
			}
		}
		if len(v) >= k.size || v == "" {
			return ps.fail(ps.line, "%s: value must be 1 to %d characters", k.name, k.size-1)
		}
		b.store(k, v, 0)
	case tU64, tUint:
		n, ok := parseU64(v)
		if !ok || (k.kind == tUint && n > 0xffffffff) {
			return ps.fail(ps.line, "%s: \"%s\" is not a whole number (write e.g. %s = 16384; 0x prefix for hex)", k.name, v, k.name)
		}
		b.store(k, v, n)
	case tCC:
		if _, _, ok := parseCC(v); !ok {
			return ps.fail(ps.line, "%s: \"%s\" is not MAJOR.MINOR (write e.g. %s = 8.6)", k.name, v, k.name)
		}
		b.store(k, v, 0)
	case tArch:
		for _, a := range archs {
			if a == v {
				b.store(k, v, 0)
				return nil
			}
		}
		return ps.fail(ps.line, "architecture: unknown \"%s\" (known: %s)", v, strings.Join(archs, " "))
	case tOnOff:
		if v != "enabled" && v != "disabled" {
			return ps.fail(ps.line, "%s: \"%s\" must be enabled or disabled", k.name, v)
		}
		b.store(k, v, 0)
	}
	return nil
}

// parseU64 reads a number as C's strtoull(v, &end, 0) does once v starts with a digit: 0x…
// hexadecimal, 0… octal, else decimal; the whole value must be the number.
func parseU64(v string) (uint64, bool) {
	if v == "" || v[0] < '0' || v[0] > '9' {
		return 0, false
	}
	base, digits := 10, v
	switch {
	case len(v) > 2 && (v[:2] == "0x" || v[:2] == "0X"):
		base, digits = 16, v[2:]
	case len(v) > 1 && v[0] == '0':
		base, digits = 8, v[1:]
	}
	if strings.ContainsAny(digits, "_+-") { // strconv accepts what strtoull does not
		return 0, false
	}
	n, err := strconv.ParseUint(digits, base, 64)
	return n, err == nil
}

// parseCC reads "MAJOR.MINOR", two whole numbers of decimal digits, each at most 32 bits, as
// fakegpu's profile.c does (parse_cc): no sign, no space.
func parseCC(v string) (uint32, uint32, bool) {
	a, b, ok := strings.Cut(v, ".")
	if !ok || !digits(a) || !digits(b) {
		return 0, 0, false
	}
	maj, err1 := strconv.ParseUint(a, 10, 32)
	min, err2 := strconv.ParseUint(b, 10, 32)
	return uint32(maj), uint32(min), err1 == nil && err2 == nil
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// uuidOK: prefix then hex groups 8-4-4-4-12 and nothing after.
func uuidOK(v, prefix string) bool {
	rest, ok := strings.CutPrefix(v, prefix)
	if !ok {
		return false
	}
	for g, n := range []int{8, 4, 4, 4, 12} {
		if len(rest) < n {
			return false
		}
		for i := 0; i < n; i++ {
			if !isHex(rest[i]) {
				return false
			}
		}
		rest = rest[n:]
		if g < 4 {
			if rest == "" || rest[0] != '-' {
				return false
			}
			rest = rest[1:]
		}
	}
	return rest == ""
}

func (ps *parser) openBlock(k, v string) error {
	isDev := k == "device"
	max := uint64(MaxDevices)
	if !isDev {
		max = MaxMIG
	}
	n, ok := parseU64(v)
	if !ok || n >= max {
		return ps.fail(ps.line, "%s: \"%s\" is not an index 0..%d", k, v, max-1)
	}
	if isDev {
		if first := ps.dline[n]; first != 0 {
			return ps.fail(ps.line, "device %d defined twice (first at line %d): give each device its own index", n, first)
		}
		ps.dline[n], ps.dev, ps.scope = ps.line, int(n), sDevice
		ps.ndev = max2(ps.ndev, int(n)+1)
		return nil
	}
	if ps.scope == sGlobal {
		return ps.fail(ps.line, "mig = %d before any device: put it after the \"device = N\" line it belongs to", n)
	}
	if first := ps.mline[ps.dev][n]; first != 0 {
		return ps.fail(ps.line, "mig %d of device %d defined twice (first at line %d)", n, ps.dev, first)
	}
	ps.mline[ps.dev][n], ps.mig, ps.scope = ps.line, int(n), sMIG
	ps.nmig[ps.dev] = max2(ps.nmig[ps.dev], int(n)+1)
	return nil
}

func max2(a, b int) int {
	if a > b {
		return a
	}
	return b
}

func bit(name string) uint64 {
	for i, k := range keys {
		if k.name == name {
			return 1 << i
		}
	}
	return 0
}

// block is the block of scope sc: the profile, device dev or its MIG instance mig.
func (ps *parser) block(sc scope, dev, mig int) *block {
	b := &block{p: ps.p}
	id := "profile"
	switch sc {
	case sDevice:
		b.d, id = &ps.devs[dev], fmt.Sprintf("device %d", dev)
	case sMIG:
		b.d, b.m, id = &ps.devs[dev], &ps.migs[dev][mig], fmt.Sprintf("mig %d.%d", dev, mig)
	}
	if ps.other != nil {
		if ps.other[id] == nil {
			ps.other[id] = map[string]string{}
		}
		b.other = ps.other[id]
	}
	return b
}

// defaults gives every key of the block's scope that it has not seen and that has a default
// that default, as fakegpu's defaults() does.
func (ps *parser) defaults(sc scope, seen uint64, b *block) {
	for i := range keys {
		k := &keys[i]
		if k.scope == sc && k.dflt != 0 && seen&(1<<i) == 0 {
			b.store(k, strconv.FormatUint(k.dflt, 10), k.dflt)
		}
	}
}
