package profile

import (
	"fmt"
	"strconv"
	"strings"
)

// finish checks the required keys and dense indexes and fills the values derived from the others,
// as fakegpu's finish() does.
func (ps *parser) finish() error {
	p := ps.p
	for i, k := range keys {
		if k.scope == sGlobal && k.required && ps.gseen&(1<<i) == 0 {
			return ps.fail(0, "missing required key \"%s\" (add a line \"%s = ...\" before the first device)", k.name, k.name)
		}
	}
	ps.defaults(sGlobal, ps.gseen, ps.block(sGlobal, 0, 0))
	if ps.ndev == 0 {
		return ps.fail(0, "no devices (add a block starting with \"device = 0\")")
	}
	unit := ps.ndev
	for d := 0; d < ps.ndev; d++ {
		if err := ps.finishDevice(d, &unit); err != nil {
			return err
		}
		dv := ps.devs[d]
		dv.MIG = append([]MIG(nil), ps.migs[d][:ps.nmig[d]]...)
		p.Devices = append(p.Devices, dv)
	}
	if p.NVMLVersion == "" {
		v := p.DriverVersion
		if len(v) > 28 {
			v = v[:28]
		}
		p.NVMLVersion = "12." + v
	}
	return nil
}

func (ps *parser) finishDevice(d int, unit *int) error {
	dv := &ps.devs[d]
	if ps.dline[d] == 0 {
		return ps.fail(0, "device %d is missing: device indexes must be 0..%d without gaps", d, ps.ndev-1)
	}
	for i, k := range keys {
		if k.scope == sDevice && k.required && ps.dseen[d]&(1<<i) == 0 {
			return ps.fail(ps.dline[d], "device %d: missing required key \"%s\" (add \"%s = ...\" to its block)", d, k.name, k.name)
		}
	}
	ps.defaults(sDevice, ps.dseen[d], ps.block(sDevice, d, 0))
	if dv.MemoryMiB == 0 {
		return ps.fail(ps.dline[d], "device %d: memory_mib must be above 0", d)
	}
	if ps.dseen[d]&bit("minor") == 0 {
		dv.Minor = uint32(d)
	}
	if dv.PCIBusID == "" {
		dv.PCIBusID = fmt.Sprintf("00000000:%02X:00.0", d+1)
	}
	nmig := ps.nmig[d]
	if nmig > 0 && ps.dseen[d]&bit("mig_mode") != 0 && !dv.MIGMode {
		return ps.fail(ps.dline[d], "device %d: has mig blocks but mig_mode = disabled", d)
	}
	if nmig > 0 {
		dv.MIGMode = true
	}
	var sum uint64
	for m := 0; m < nmig; m++ {
		if ps.mline[d][m] == 0 {
			return ps.fail(0, "device %d: mig %d is missing: indexes must be 0..%d without gaps", d, m, nmig-1)
		}
		for i, k := range keys {
			if k.scope == sMIG && k.required && ps.mseen[d][m]&(1<<i) == 0 {
				return ps.fail(ps.mline[d][m], "device %d mig %d: missing required key \"%s\"", d, m, k.name)
			}
		}
		mg := &ps.migs[d][m]
		ps.defaults(sMIG, ps.mseen[d][m], ps.block(sMIG, d, m))
		mg.Slices = migSlices(mg.Profile)
		if ps.mseen[d][m]&bit("mig_copy_engines") == 0 {
			mg.CopyEngines = mg.Slices
		}
		sum += mg.MemoryMiB
		if *unit >= MaxUnits {
			return ps.fail(ps.mline[d][m], "too many GPUs and MIG instances (at most %d)", MaxUnits)
		}
		*unit++
	}
	if sum > dv.MemoryMiB {
		return ps.fail(ps.dline[d], "device %d: MIG instances hold %d MiB, more than memory_mib", d, sum)
	}
	return nil
}

// migSlices is the <n> of a MIG profile "<n>g.…" when 1 ≤ n ≤ 8, else 1 (fakegpu reads it with
// strtoul, which takes a sign: a negative n is out of range, so 1).
func migSlices(profile string) uint32 {
	s := strings.TrimPrefix(profile, "+")
	if strings.HasPrefix(profile, "-") {
		return 1
	}
	end := 0
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	n, err := strconv.ParseUint(s[:end], 10, 64)
	if err != nil || end == len(s) || s[end] != 'g' || n == 0 || n > 8 {
		return 1
	}
	return uint32(n)
}
