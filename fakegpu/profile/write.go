package profile

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// Write writes p as a profile: its global keys, then each device's block and its MIG blocks,
// every key a Go field keeps in keys.def's order. A zero field is left out, so that the reader
// derives the value (minor: the device's index, mig_copy_engines: its slices …), except for a
// required key and a key with a default in keys.def, which are written as they are: New and
// NewDevice start from those defaults. What it wrote is read back before it is written out, so a
// value the format cannot carry is an error here, not in the driver that reads the file.
func Write(w io.Writer, p *Profile) error {
	var b bytes.Buffer
	b.WriteString("# written by fakegpu/profile.Write\n")
	if err := writeKeys(&b, sGlobal, p); err != nil {
		return err
	}
	for d := range p.Devices {
		dv := &p.Devices[d]
		fmt.Fprintf(&b, "\ndevice = %d\n", d)
		if err := writeKeys(&b, sDevice, dv); err != nil {
			return fmt.Errorf("device %d: %w", d, err)
		}
		for m := range dv.MIG {
			fmt.Fprintf(&b, "mig = %d\n", m)
			if err := writeKeys(&b, sMIG, &dv.MIG[m]); err != nil {
				return fmt.Errorf("device %d mig %d: %w", d, m, err)
			}
		}
	}
	name := p.Path
	if name == "" {
		name = "written"
	}
	if _, err := Parse(name, b.Bytes()); err != nil {
		return fmt.Errorf("write profile: %w", err)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// writeKeys writes "key = value" for every key of scope sc that t (a *Profile, *Device or *MIG)
// keeps in a field that is not zero, or that is required.
func writeKeys(b *bytes.Buffer, sc scope, t any) error {
	for i := range keys {
		k := &keys[i]
		if k.scope != sc {
			continue
		}
		v, ok := writeValue(t, k)
		if !ok {
			continue
		}
		if strings.ContainsAny(v, "#\n\r\x00") || strings.TrimSpace(v) != v {
			return fmt.Errorf("%s: %q cannot be written in a profile (no '#', line break or surrounding space)", k.name, v)
		}
		fmt.Fprintf(b, "%s = %s\n", k.name, v)
	}
	return nil
}

// writeValue is key k's value in t as the profile writes it, and whether to write it.
func writeValue(t any, k *key) (string, bool) {
	if k.kind == tCC {
		maj, ok1 := field(t, k.name, "major")
		min, ok2 := field(t, k.name, "minor")
		if !ok1 || !ok2 || (maj.Uint() == 0 && min.Uint() == 0 && !k.required && k.dflt == 0) {
			return "", false
		}
		return fmt.Sprintf("%d.%d", maj.Uint(), min.Uint()), true
	}
	f, ok := field(t, k.name, "")
	if !ok || (f.IsZero() && !k.required && k.dflt == 0) {
		return "", false
	}
	switch f.Kind() {
	case reflect.String:
		return f.String(), true
	case reflect.Bool:
		if f.Bool() {
			return "enabled", true
		}
		return "disabled", true
	}
	return strconv.FormatUint(f.Uint(), 10), true
}

// New returns a profile whose fields hold keys.def's defaults (context_mib, launch_ns …): what
// the reader gives a profile that leaves those keys out.
func New() *Profile {
	p := &Profile{}
	setDefaults(sGlobal, &block{p: p})
	return p
}

// NewDevice returns a device whose fields hold keys.def's defaults (bar1_mib …).
func NewDevice() Device {
	var d Device
	setDefaults(sDevice, &block{d: &d})
	return d
}

func setDefaults(sc scope, b *block) {
	for i := range keys {
		if k := &keys[i]; k.scope == sc && k.dflt != 0 {
			b.store(k, strconv.FormatUint(k.dflt, 10), k.dflt)
		}
	}
}
