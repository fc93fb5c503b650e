package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/limitbed/limitbed/internal/fixtures"
	"github.com/limitbed/limitbed/plugin/region"
)

func write(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "usage.cache")
	if err := os.WriteFile(p, b, 0o666); err != nil {
		t.Fatal(err)
	}
	return p
}

func runDump(t *testing.T, args ...string) (dump, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	rc := run(args, &out, &errb)
	var d dump
	if rc == 0 {
		if err := json.Unmarshal(out.Bytes(), &d); err != nil {
			t.Fatalf("output %q: %v", out.String(), err)
		}
	}
	return d, errb.String(), rc
}

// TestDumpHAMiCore prints the region upstream HAMi-core wrote, with its
// context and data parts.
func TestDumpHAMiCore(t *testing.T) {
	p := write(t, fixtures.Read(t, "hami-core-region/live-1024mib.cache.gz"))
	d, stderr, rc := runDump(t, p)
	const mib = 1 << 20
	if rc != 0 {
		t.Fatalf("rc %d: %s", rc, stderr)
	}
	if d.Path != p || d.Layout != region.HAMiCoreLayout || len(d.Devices) != 1 || d.Devices[0].UsedBytes != 1324*mib ||
		len(d.Slots) != 1 || d.Slots[0].PID != 5441 || !d.Slots[0].Alive || d.Slots[0].Parts == nil ||
		d.Slots[0].Parts[0] != (region.MemoryParts{Context: 300 * mib, Data: 1024 * mib}) {
		t.Fatalf("dump = %+v", d)
	}
}

// TestDumpLimitbedLiveness: a slot is alive while some process holds its lock
// byte, dead once the lock is gone; regiondump itself takes no lock.
func TestDumpLimitbedLiveness(t *testing.T) {
	p := write(t, region.LimitbedSpec{
		Limits: map[int]uint64{0: 3000 << 20}, UsedTotal: map[int]uint64{0: 30},
		Slots: []region.LimitbedSpecSlot{
			{Active: true, PID: 100, Used: map[int]uint64{0: 10}},
			{Active: true, PID: 101, Used: map[int]uint64{0: 20}},
		},
	}.Bytes())
	owner, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: region.LockByte(1), Len: 1}
	if err := unix.FcntlFlock(owner.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Fatal(err)
	}
	d, stderr, rc := runDump(t, p)
	if rc != 0 {
		t.Fatalf("rc %d: %s", rc, stderr)
	}
	if len(d.Slots) != 2 || d.Slots[0].Alive || !d.Slots[1].Alive || d.Slots[1].PID != 101 ||
		d.Devices[0].UsedBytes != 30 || d.Devices[0].LiveBytes != 20 || d.Layout != region.LimitbedLayout {
		t.Fatalf("dump = %+v", d)
	}
}

func TestDumpRefuses(t *testing.T) {
	dir := t.TempDir()
	garbage := write(t, []byte("not a region at all"))
	link := filepath.Join(dir, "link")
	if err := os.Symlink(garbage, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		args    []string
		rc      int
		mention []string
	}{
		{"no argument", nil, 2, []string{"usage: regiondump PATH"}},
		{"two arguments", []string{garbage, garbage}, 2, []string{"usage"}},
		{"missing", []string{filepath.Join(dir, "missing")}, 1, []string{"missing", "no such file"}},
		{"garbage", []string{garbage}, 1, []string{garbage, "not a usage region", "understood: limitbed v2", "hami-core v1.x"}},
		{"symlink", []string{link}, 1, []string{link}},
		{"fifo", []string{fifo}, 1, []string{fifo, "not a regular file"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, rc := runDump(t, tc.args...)
			if rc != tc.rc {
				t.Fatalf("rc = %d, want %d (%s)", rc, tc.rc, stderr)
			}
			for _, m := range tc.mention {
				if !strings.Contains(stderr, m) {
					t.Errorf("stderr %q does not mention %q", stderr, m)
				}
			}
		})
	}
}
