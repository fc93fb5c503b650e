package profile

import (
	"bytes"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
)

// roundTrip writes p and reads it back.
func roundTrip(t *testing.T, p *Profile) *Profile {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, p); err != nil {
		t.Fatalf("Write: %v", err)
	}
	q, err := Parse(p.Path, b.Bytes())
	if err != nil {
		t.Fatalf("Parse(Write(p)): %v\n%s", err, b.String())
	}
	return q
}

// TestWriteShippedProfiles: every shipped profile, read, written and read again, is the same.
func TestWriteShippedProfiles(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(cbuild.RepoRoot(), "fakegpu", "profiles", "*.profile"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no shipped profiles: %v", err)
	}
	for _, path := range paths {
		p, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if q := roundTrip(t, p); !reflect.DeepEqual(p, q) {
			t.Errorf("%s: written and read back:\n%+v\nwant\n%+v", filepath.Base(path), q, p)
		}
	}
}

// TestWriteDefaults: New and NewDevice start from keys.def's defaults, which are written as they
// are; a zero field of a key without one is left to the reader to derive.
func TestWriteDefaults(t *testing.T) {
	p := New()
	p.Path, p.DriverVersion, p.CUDAVersion = "x.profile", "550.90.07", 12040
	for i := 0; i < 2; i++ {
		d := NewDevice()
		d.Name, d.UUID, d.MemoryMiB, d.Architecture, d.CCMajor, d.SMCount = "X", fmt.Sprintf("GPU-00000000-0000-0000-0000-00000000000%d", i), 1024, "ampere", 8, 10
		p.Devices = append(p.Devices, d)
	}
	p.Devices[0].BAR1MiB = 0 // given as 0: read as 0, not as the default
	q := roundTrip(t, p)
	if q.ContextMiB != 300 || q.LaunchNS != 10000 || q.Devices[1].Minor != 1 || q.Devices[1].BAR1MiB != 256 ||
		q.Devices[0].BAR1MiB != 0 || q.Devices[0].PCIBusID != "00000000:01:00.0" || q.NVMLVersion != "12.550.90.07" {
		t.Errorf("defaults: %+v", q)
	}
}

func TestWriteRefuses(t *testing.T) {
	dev := Device{Name: "X", UUID: "GPU-00000000-0000-0000-0000-000000000000", MemoryMiB: 1024, Architecture: "ampere", CCMajor: 8, SMCount: 10}
	for _, tc := range []struct {
		name string
		p    Profile
		want string
	}{
		{"a comment mark", Profile{DriverVersion: "550#1", CUDAVersion: 1, Devices: []Device{dev}}, "cannot be written"},
		{"a line break", Profile{DriverVersion: "550\nx = 1", CUDAVersion: 1, Devices: []Device{dev}}, "cannot be written"},
		{"no device", Profile{DriverVersion: "550", CUDAVersion: 1}, "no devices"},
		{"a bad UUID", Profile{DriverVersion: "550", CUDAVersion: 1, Devices: []Device{{Name: "X", UUID: "GPU-1", MemoryMiB: 1, Architecture: "ampere", CCMajor: 8, SMCount: 1}}}, "is not a UUID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Write(&bytes.Buffer{}, &tc.p); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Write: %v, want %q", err, tc.want)
			}
		})
	}
}

// FuzzWrite: whatever the reader accepts, the writer writes so that it reads back the same.
func FuzzWrite(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		p, err := Parse("fuzz.profile", []byte(text))
		if err != nil {
			return
		}
		if q := roundTrip(t, p); !reflect.DeepEqual(p, q) {
			t.Fatalf("written and read back:\n%+v\nwant\n%+v", q, p)
		}
	})
}
