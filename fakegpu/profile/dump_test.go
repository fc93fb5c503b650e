package profile

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
)

// dump prints the profile at path as Go reads it (or its error) as testdata/dump.c prints
// fakegpu's: every key of every block in keys.def's order, then what is derived. The two readers
// agree exactly when their dumps are equal.
func dump(path string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "== %s\n", path)
	text, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(&b, "error: %v\n", err)
		return b.String()
	}
	p, other, err := parse(path, text, true)
	if err != nil {
		fmt.Fprintf(&b, "error: %v\n", err)
		return b.String()
	}
	fmt.Fprintf(&b, "profile name=%s", p.Name)
	dumpKeys(&b, sGlobal, p, other["profile"])
	b.WriteString("\n")
	for d := range p.Devices {
		v := &p.Devices[d]
		fmt.Fprintf(&b, "device %d", d)
		dumpKeys(&b, sDevice, v, other[fmt.Sprintf("device %d", d)])
		b.WriteString("\n")
		for m := range v.MIG {
			g := &v.MIG[m]
			fmt.Fprintf(&b, "mig %d.%d", d, m)
			dumpKeys(&b, sMIG, g, other[fmt.Sprintf("mig %d.%d", d, m)])
			fmt.Fprintf(&b, " slices=%d\n", g.Slices)
		}
	}
	return b.String()
}

// dumpKeys prints " key=value" for every key of scope sc: from its Go field in t, else as the
// parser kept it, else the zero value fakegpu's struct holds for a key not given.
func dumpKeys(b *strings.Builder, sc scope, t any, other map[string]string) {
	for i := range keys {
		k := &keys[i]
		if k.scope != sc {
			continue
		}
		fmt.Fprintf(b, " %s=%s", k.name, dumpValue(t, k, other))
	}
}

func dumpValue(t any, k *key, other map[string]string) string {
	if k.kind == tCC {
		maj, ok1 := field(t, k.name, "major")
		min, ok2 := field(t, k.name, "minor")
		if ok1 && ok2 {
			return fmt.Sprintf("%d.%d", maj.Uint(), min.Uint())
		}
	} else if f, ok := field(t, k.name, ""); ok {
		switch {
		case k.kind == tArch:
			return strconv.Itoa(nvmlArch(f.String()))
		case f.Kind() == reflect.Bool:
			if f.Bool() {
				return "1"
			}
			return "0"
		case f.Kind() == reflect.String:
			return f.String()
		}
		return strconv.FormatUint(f.Uint(), 10)
	}
	if v, ok := other[k.name]; ok {
		return v
	}
	switch {
	case k.kind.text():
		return ""
	case k.kind == tCC:
		return "0.0"
	}
	return "0"
}
