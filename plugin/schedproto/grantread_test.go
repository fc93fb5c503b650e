package schedproto

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The scheduler's allowed time reaches a reader of the file (the node's monitor) with the beat
// that stamps it; a fresh file, and one an older scheduler beats without stamping, read as not
// counting.
func TestGrantAllowedTime(t *testing.T) {
	gpuB := gpuA
	gpuB[15] = 0x51
	b, err := GrantSpec{GPUs: []UUID{gpuA, gpuB}, Period: 100 * time.Millisecond}.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, b)
	fresh, err := ReadGrant(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(fresh.GPU) != 2 || fresh.Period != 100*time.Millisecond || fresh.GPU[1].UUID != gpuB || fresh.GPU[0].State != Wait {
		t.Fatalf("fresh grant: %+v", fresh)
	}
	for i, e := range fresh.GPU {
		if e.Counting() || e.Allowed != 0 {
			t.Errorf("fresh entry %d: counting %v allowed %v, want neither", i, e.Counting(), e.Allowed)
		}
	}
	g, err := OpenGrant(p)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for range 3 {
		g.Beat(0) // an older scheduler: beats, no stamp
	}
	g.Set(1, Run, 7, 0)
	g.BeatAllowed(1, 1500*time.Microsecond)
	g.BeatAllowed(1, 2500*time.Microsecond+999*time.Nanosecond) // µs: the rest is dropped
	got, err := ReadGrant(p)
	if err != nil {
		t.Fatal(err)
	}
	if e := got.GPU[0]; e.Counting() || e.Beat != 3 {
		t.Errorf("beaten without a stamp: %+v counting %v, want not counting", e, e.Counting())
	}
	if e := got.GPU[1]; !e.Counting() || e.Allowed != 2500*time.Microsecond || e.Beat != 2 || e.AllowedBeat != 2 || e.State != Run || e.Seq != 1 {
		t.Errorf("stamped: %+v counting %v, want 2.5 ms at beat 2, run", e, e.Counting())
	}
	if g.Allowed(1) != 2500*time.Microsecond || g.Allowed(0) != 0 {
		t.Errorf("Allowed: %v %v", g.Allowed(1), g.Allowed(0))
	}
	// A beat in flight (stamp written, beat not yet): still counting. Two behind: not.
	for _, tc := range []struct {
		beat, stamp uint32
		want        bool
	}{{5, 6, false}, {5, 5, true}, {6, 5, true}, {7, 5, false}, {0, 0, false}, {1, 0, false}, {0, 0xffffffff, true}} {
		if got := (GrantEntry{Beat: tc.beat, AllowedBeat: tc.stamp}).Counting(); got != tc.want {
			t.Errorf("beat %d stamp %d: counting %v, want %v", tc.beat, tc.stamp, got, tc.want)
		}
	}
}

// ReadGrant refuses what is not a grant file, and never follows a link or blocks on a FIFO.
func TestReadGrantRejects(t *testing.T) {
	good, err := GrantSpec{GPUs: []UUID{gpuA}}.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	if err := os.Symlink(writeFile(t, good), link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	mutate := func(off int, v uint64, size int) []byte {
		b := append([]byte(nil), good...)
		if size == 8 {
			binary.NativeEndian.PutUint64(b[off:], v)
		} else {
			binary.NativeEndian.PutUint32(b[off:], uint32(v))
		}
		return b
	}
	for name, path := range map[string]string{
		"symlink":          link,
		"fifo":             fifo,
		"absent":           filepath.Join(dir, "none"),
		"directory":        dir,
		"short":            writeFile(t, good[:100]),
		"long":             writeFile(t, append(append([]byte(nil), good...), 0)),
		"zeros":            writeFile(t, make([]byte, FileSize)),
		"report magic":     writeFile(t, mutate(offMagic, ReportMagic, 8)),
		"version 2":        writeFile(t, mutate(offVersion, 2, 4)),
		"no GPUs":          writeFile(t, mutate(offNGPUs, 0, 4)),
		"17 GPUs":          writeFile(t, mutate(offNGPUs, MaxGPUs+1, 4)),
		"entry sans UUID":  writeFile(t, mutate(offNGPUs, 2, 4)),
		"allowed overflow": writeFile(t, mutate(entries+offAllowed, 1<<63, 8)),
	} {
		if g, err := ReadGrant(path); err == nil {
			t.Errorf("%s: read %+v", name, g)
		}
	}
}

// ParseGrant is total: any bytes give a grant or an error, and a grant it gives has its entries'
// words and beats as written.
func FuzzParseGrant(f *testing.F) {
	good, _ := GrantSpec{GPUs: []UUID{gpuA, gpuA}, Period: time.Second}.Bytes()
	f.Add(good)
	f.Add(make([]byte, FileSize))
	f.Add([]byte("LBSCHED\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := ParseGrant(b)
		if err != nil {
			return
		}
		if len(g.GPU) == 0 || len(g.GPU) > MaxGPUs {
			t.Fatalf("%d entries", len(g.GPU))
		}
		ne := binary.NativeEndian
		for i, e := range g.GPU {
			o := entries + i*entrySize
			if Word(e.Seq, e.State) != ne.Uint32(b[o+offWord:]) || e.Beat != ne.Uint32(b[o+offBeat:]) || e.UUID.IsZero() ||
				e.Allowed < 0 || uint64(e.Allowed/time.Microsecond) != ne.Uint64(b[o+offAllowed:]) {
				t.Fatalf("entry %d decoded as %+v", i, e)
			}
		}
	})
}
