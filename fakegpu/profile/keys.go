package profile

import (
	_ "embed"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
)

// keysDef is the one table of the profile's keys, which fakegpu's C reader includes too.
//
//go:embed keys.def
var keysDef string

// keys is keysDef parsed, in its order (the order of "known:" in errors).
var keys = mustParseKeys(keysDef)

type scope int

const (
	sGlobal scope = iota
	sDevice
	sMIG
)

type kind int

const (
	tStr kind = iota
	tU64
	tUint
	tCC
	tArch
	tOnOff
	tGPUUUID
	tMIGUUID
	tPCI
)

// key is one key of the format; size is the C field's size for text (values are 1..size-1
// characters), dflt what a missing key reads as (0: none).
type key struct {
	name     string
	scope    scope
	kind     kind
	size     int
	required bool
	dflt     uint64
}

var (
	scopes = map[string]scope{"GLOBAL": sGlobal, "DEVICE": sDevice, "MIG": sMIG}
	kinds  = map[string]kind{"STR": tStr, "U64": tU64, "UINT": tUint, "CC": tCC, "ARCH": tArch, "ONOFF": tOnOff,
		"GPU_UUID": tGPUUUID, "MIG_UUID": tMIGUUID, "PCI": tPCI}
	keyLine = regexp.MustCompile(`^FG_KEY\((\w+), (\w+), (\w+), (\w+), (\d+), ([01]), (\d+)\)$`)
)

func (k kind) text() bool { return k == tStr || k == tGPUUUID || k == tMIGUUID || k == tPCI }

// parseKeys reads keys.def: one FG_KEY(scope, name, field, type, size, required, default) a line;
// the comment and the #undef around them are C's.
func parseKeys(def string) ([]key, error) {
	var out []key
	seen := map[string]bool{}
	for i, line := range strings.Split(def, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "FG_KEY(") {
			continue
		}
		m := keyLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("keys.def line %d: %q is not FG_KEY(scope, name, field, type, size, required, default)", i+1, line)
		}
		sc, ok1 := scopes[m[1]]
		kd, ok2 := kinds[m[4]]
		size, _ := strconv.Atoi(m[5])
		dflt, err := strconv.ParseUint(m[7], 10, 64)
		switch {
		case !ok1 || !ok2:
			return nil, fmt.Errorf("keys.def line %d: unknown scope %s or type %s", i+1, m[1], m[4])
		case seen[m[2]]:
			return nil, fmt.Errorf("keys.def line %d: key %s twice", i+1, m[2])
		case kd.text() != (size > 0):
			return nil, fmt.Errorf("keys.def line %d: %s: a size for a text key, 0 for the others", i+1, m[2])
		case err != nil || (dflt != 0 && kd != tU64 && kd != tUint):
			return nil, fmt.Errorf("keys.def line %d: %s: a default only for a number", i+1, m[2])
		}
		seen[m[2]] = true
		out = append(out, key{name: m[2], scope: sc, kind: kd, size: size, required: m[6] == "1", dflt: dflt})
	}
	if len(out) == 0 || len(out) > 64 {
		return nil, fmt.Errorf("keys.def: %d keys (a block's seen keys are the bits of a uint64)", len(out))
	}
	return out, nil
}

func mustParseKeys(def string) []key {
	ks, err := parseKeys(def)
	if err != nil {
		panic(err)
	}
	return ks
}

// The Go structs name the keys they keep with a tag, `profile:"name"` (`profile:"name,major"` and
// ",minor" for the two halves of a CC key). A key no field names is read and checked all the same,
// and kept as text beside the structs (block.other): only the code that uses a key needs a field.

// field returns the field of v (a *Profile, *Device or *MIG) that keeps key name's value, or its
// part (major, minor) of a CC key.
func field(v any, name, part string) (reflect.Value, bool) {
	s := reflect.ValueOf(v).Elem()
	for i := 0; i < s.NumField(); i++ {
		tag, ok := s.Type().Field(i).Tag.Lookup("profile")
		if !ok {
			continue
		}
		n, p, _ := strings.Cut(tag, ",")
		if n == name && p == part {
			return s.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// target is the struct of the block a key of scope sc belongs to.
func (b *block) target(sc scope) any {
	switch sc {
	case sDevice:
		return b.d
	case sMIG:
		return b.m
	}
	return b.p
}

// store keeps a checked value: in its Go field, or as its canonical text in b.other.
func (b *block) store(k *key, v string, n uint64) {
	t := b.target(k.scope)
	if k.kind == tCC {
		maj, min, _ := parseCC(v)
		fa, ok1 := field(t, k.name, "major")
		fb, ok2 := field(t, k.name, "minor")
		if ok1 && ok2 {
			fa.SetUint(uint64(maj))
			fb.SetUint(uint64(min))
			return
		}
	} else if f, ok := field(t, k.name, ""); ok {
		switch f.Kind() {
		case reflect.String:
			f.SetString(v)
		case reflect.Bool:
			f.SetBool(v == "enabled")
		default:
			f.SetUint(n)
		}
		return
	}
	if b.other != nil {
		b.other[k.name] = canonical(k, v, n)
	}
}

// canonical is a key's value as fakegpu's test driver prints it (testdata/dump.c): numbers in
// decimal, an architecture as NVML's number, mig_mode as 1 or 0.
func canonical(k *key, v string, n uint64) string {
	switch k.kind {
	case tU64, tUint:
		return strconv.FormatUint(n, 10)
	case tArch:
		return strconv.Itoa(nvmlArch(v))
	case tOnOff:
		if v == "enabled" {
			return "1"
		}
		return "0"
	case tCC:
		maj, min, _ := parseCC(v)
		return fmt.Sprintf("%d.%d", maj, min)
	}
	return v
}

// nvmlArch is NVML's number for an architecture name (abi/include/limitbed/nvml_abi.h:
// NVML_DEVICE_ARCH_KEPLER 2 … HOPPER 9), which fakegpu stores.
func nvmlArch(name string) int {
	for i, a := range archs {
		if a == name {
			return i + 2
		}
	}
	return 0
}
