// Package nvsmi knows NVIDIA's nvidia-smi: where this machine keeps Debian's binary (extracted
// from the non-free package by scripts/nvidia-smi.sh, never installed), where the workload image
// carries it, the command lines the harness runs and how to read what they print. The doctor,
// the matrix, the kind tier and fakegpu's tests read nvidia-smi only through it.
package nvsmi

import (
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ContainerPath is where the workload image carries nvidia-smi (where the NVIDIA container
// toolkit mounts the host's).
const ContainerPath = "/usr/bin/nvidia-smi"

// EnvBinary names an nvidia-smi binary to use instead of the extracted one.
const EnvBinary = "LIMITBED_NVIDIA_SMI"

// ErrMissing: this machine has no nvidia-smi binary; the error says how to get one.
var ErrMissing = errors.New("Debian's nvidia-smi is not on this machine")

// Locate returns the nvidia-smi binary: $LIMITBED_NVIDIA_SMI, else the newest version
// scripts/nvidia-smi.sh extracted under ${LIMITBED_CACHE:-/var/cache/limitbed}/nvidia-smi.
func Locate() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm()&0o111 == 0 {
			return "", fmt.Errorf("%s=%s: not an executable file (%v)", EnvBinary, p, err)
		}
		return p, nil
	}
	cache := os.Getenv("LIMITBED_CACHE")
	if cache == "" {
		cache = "/var/cache/limitbed"
	}
	found, _ := filepath.Glob(filepath.Join(cache, "nvidia-smi", "*", "nvidia-smi"))
	if len(found) == 0 {
		return "", fmt.Errorf("%w (looked in %s/nvidia-smi): scripts/nvidia-smi.sh extracts it from the non-free "+
			"package (scripts/install-deps.sh runs it), or set %s", ErrMissing, cache, EnvBinary)
	}
	sort.Slice(found, func(i, j int) bool { return versionLess(found[i], found[j]) })
	return found[len(found)-1], nil
}

// versionLess orders paths by their numeric runs (535.9 before 535.10).
func versionLess(a, b string) bool {
	split := func(s string) []string {
		return strings.FieldsFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	}
	x, y := split(a), split(b)
	for i := 0; i < len(x) && i < len(y); i++ {
		m, _ := strconv.Atoi(x[i])
		n, _ := strconv.Atoi(y[i])
		if m != n {
			return m < n
		}
	}
	return len(x) < len(y)
}

// TotalsArgs print one line per GPU: its memory total in MiB.
var TotalsArgs = []string{"--query-gpu=memory.total", "--format=csv,noheader,nounits"}

// TotalsCommand is the shell line that runs bin with TotalsArgs.
func TotalsCommand(bin string) string { return bin + " " + strings.Join(TotalsArgs, " ") }

// ParseTotals reads TotalsArgs' output: one memory total per GPU, in MiB.
func ParseTotals(out []byte) ([]uint64, error) {
	var totals []uint64
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(line, "MiB")), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi memory.total line %q is not a number of MiB", line)
		}
		totals = append(totals, n)
	}
	if len(totals) == 0 {
		return nil, errors.New("nvidia-smi printed no GPU")
	}
	return totals, nil
}

// ParseCSV reads `--query-…=… --format=csv` output: one map per row, keyed by the header's
// field names without their unit ("memory.total [MiB]" is "memory.total"); values as printed.
func ParseCSV(out []byte) ([]map[string]string, error) {
	r := csv.NewReader(strings.NewReader(string(out)))
	r.TrimLeadingSpace = true
	recs, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi csv: %w", err)
	}
	if len(recs) == 0 {
		return nil, errors.New("nvidia-smi csv: no header line")
	}
	var keys []string
	for _, h := range recs[0] {
		name, _, _ := strings.Cut(h, " [")
		keys = append(keys, strings.TrimSpace(name))
	}
	var rows []map[string]string
	for _, rec := range recs[1:] {
		row := map[string]string{}
		for i, v := range rec {
			row[keys[i]] = strings.TrimSpace(v)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// MiB reads a value printed as "1234 MiB" (or a bare number); false for "[N/A]" and the like.
func MiB(v string) (uint64, bool) {
	n, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "MiB")), 10, 64)
	return n, err == nil
}
