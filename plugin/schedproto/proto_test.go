package schedproto

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

var gpuA = UUID{0x3c, 0x5a, 0x7e, 0x21, 0x8f, 0x4b, 0x4d, 0x2a, 0x9b, 0x61, 0x0a, 0x1c, 0x2d, 0x3e, 0x4f, 0x50}

func TestParseUUID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want UUID
		ok   bool
	}{
		{"GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50", gpuA, true},
		{"GPU-3C5A7E21-8F4B-4D2A-9B61-0A1C2D3E4F50", gpuA, true},
		{"MIG-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50", UUID{}, false},
		{"GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f5", UUID{}, false},
		{"GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4fzz", UUID{}, false},
		{"", UUID{}, false},
	} {
		got, err := ParseUUID(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseUUID(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok && got.String() != "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50" {
			t.Errorf("String() = %s", got)
		}
	}
}

func TestWordAndJoin(t *testing.T) {
	for _, s := range []State{Off, Wait, Run, Free} {
		seq, got := SplitWord(Word(0x3fffffff, s))
		if seq != 0x3fffffff || got != s {
			t.Errorf("Word round trip of %v: seq %#x state %v", s, seq, got)
		}
	}
	if SeqSince(0x3ffffffe, 1) != 3 {
		t.Errorf("SeqSince across the wrap = %d, want 3", SeqSince(0x3ffffffe, 1))
	}
	j := Join{Grant: 7, Joins: 3, Drains: 2}
	if DecodeJoin(j.Encode()) != j {
		t.Errorf("join round trip: %+v", DecodeJoin(j.Encode()))
	}
	for _, tc := range []struct {
		j    Join
		g    uint32
		want bool
	}{
		{Join{Grant: 7, Joins: 3, Drains: 2}, 7, false},
		{Join{Grant: 7, Joins: 3, Drains: 3}, 7, true},
		{Join{Grant: 6, Joins: 3, Drains: 0}, 7, true}, // nobody joined slice 7
		{Join{}, 7, true},
	} {
		if got := tc.j.Drained(tc.g); got != tc.want {
			t.Errorf("%+v.Drained(%d) = %v, want %v", tc.j, tc.g, got, tc.want)
		}
	}
}

func writeFile(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestGrantFile(t *testing.T) {
	gpuB := gpuA
	gpuB[15] = 0x51
	b, err := GrantSpec{GPUs: []UUID{gpuA, gpuB}, Period: 100 * time.Millisecond}.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, b)
	g, err := OpenGrant(p)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if len(g.GPUs()) != 2 || g.GPUs()[1] != gpuB {
		t.Fatalf("GPUs %v", g.GPUs())
	}
	if seq, s := g.Load(1); seq != 0 || s != Wait {
		t.Fatalf("new entry: seq %d state %v, want 0 wait", seq, s)
	}
	g.Set(1, Run, 42, 30*time.Millisecond)
	g.Beat(1)
	if seq, s := g.Load(1); seq != 1 || s != Run || g.Beats(1) != 1 {
		t.Fatalf("after Set and Beat: seq %d state %v beat %d, want 1 run 1 (a beat leaves the word)", seq, s, g.Beats(1))
	}
	data, _ := os.ReadFile(p)
	gpus, words, err := DecodeGrant(data)
	if err != nil || len(gpus) != 2 || words[1] != Word(1, Run) || words[0] != Word(0, Wait) {
		t.Fatalf("DecodeGrant: %v %v %v", gpus, words, err)
	}
	if got := *(*uint32)(unsafe.Pointer(&data[entries+entrySize+offGrantID])); got != 42 {
		t.Errorf("grant id %d, want 42", got)
	}
	if got := *(*uint32)(unsafe.Pointer(&data[entries+entrySize+offBudget])); got != 30000 {
		t.Errorf("budget %d µs, want 30000", got)
	}
	if g.Replaced() {
		t.Error("Replaced before any change")
	}
	if err := os.Rename(writeFile(t, b), p); err != nil {
		t.Fatal(err)
	}
	if !g.Replaced() {
		t.Error("Replaced missed a new file at the path")
	}
	for _, bad := range []GrantSpec{{}, {GPUs: make([]UUID, MaxGPUs+1)}, {GPUs: []UUID{{}}}} {
		if _, err := bad.Bytes(); err == nil {
			t.Errorf("GrantSpec %d GPUs rendered", len(bad.GPUs))
		}
	}
	if _, err := OpenGrant(writeFile(t, make([]byte, FileSize))); err == nil {
		t.Error("OpenGrant accepted a file without the magic")
	}
	if _, err := OpenGrant(writeFile(t, b[:100])); err == nil {
		t.Error("OpenGrant accepted a short file")
	}
}

// The mapped reader and DecodeReport read the same bytes the same way.
func TestReportFileAgreesWithDecode(t *testing.T) {
	spec := ReportSpec{Entries: map[int]Entry{
		0:  {Join: Join{Grant: 9, Joins: 2, Drains: 1}, Want: 5, Active: 77, Bell: 3},
		15: {Join: Join{Grant: 0xffffffff, Joins: 0xffff, Drains: 0xffff}, Want: 0xffffffff},
	}}
	b := spec.Bytes()
	r, err := DecodeReport(b)
	if err != nil {
		t.Fatal(err)
	}
	f, err := OpenReport(writeFile(t, b))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range MaxGPUs {
		e, err := f.Entry(i)
		if err != nil {
			t.Fatal(err)
		}
		if e != r.GPU[i] || e != spec.Entries[i] {
			t.Errorf("entry %d: mapped %+v, decoded %+v, written %+v", i, e, r.GPU[i], spec.Entries[i])
		}
	}
	if _, err := f.Entry(MaxGPUs); err == nil {
		t.Error("entry out of range read")
	}
}

func TestReportRejects(t *testing.T) {
	good := ReportSpec{}.Bytes()
	if _, err := DecodeReport(good[:FileSize-1]); err == nil {
		t.Error("short report decoded")
	}
	if _, err := DecodeReport(ReportSpec{Magic: GrantMagic}.Bytes()); err == nil {
		t.Error("report with the grant magic decoded")
	}
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	if err := os.Symlink(writeFile(t, good), link); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenReport(link); err == nil {
		t.Error("OpenReport followed a symlink")
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := OpenReport(fifo); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("OpenReport opened a FIFO")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OpenReport blocked on a FIFO")
	}
	if _, err := OpenReport(writeFile(t, append(good, 0))); err == nil {
		t.Error("OpenReport accepted a file one byte too long")
	}
	// A bad magic is refused at every read.
	f, err := OpenReport(writeFile(t, ReportSpec{Magic: 1}.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Entry(0); err == nil {
		t.Error("Entry read a report without its magic")
	}
}

// A container truncating its report under the mapping costs a read, not the scheduler.
func TestReportTruncatedUnderMapping(t *testing.T) {
	p := writeFile(t, ReportSpec{Entries: map[int]Entry{3: {Want: 1}}}.Bytes())
	f, err := OpenReport(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Entry(3); err == nil {
		t.Error("Entry of a truncated report returned no error")
	}
	if err := f.WaitBell(3, 0, 10*time.Millisecond); err == nil {
		t.Error("WaitBell on a truncated report returned no error")
	}
	if !f.Replaced() {
		// Same inode, truncated: still the same file; the next Entry fails again.
		if _, err := f.Entry(0); err == nil {
			t.Error("second read of the truncated report succeeded")
		}
	}
}

// A ring of the bell through another mapping of the same file (the container's) wakes WaitBell;
// the grant's Set wakes a waiter on the word the same way.
func TestFutexAcrossMappings(t *testing.T) {
	p := writeFile(t, ReportSpec{}.Bytes())
	f, err := OpenReport(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := unix.Open(p, unix.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := unix.Mmap(fd, 0, FileSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(other)
	bell := (*uint32)(unsafe.Pointer(&other[entries+2*entrySize+offBell]))
	go func() {
		time.Sleep(50 * time.Millisecond)
		atomic.AddUint32(bell, 1)
		futexWakeAll(bell)
	}()
	t0 := time.Now()
	if err := f.WaitBell(2, 0, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("WaitBell returned after %v: the ring did not wake it", d)
	}
	if e, _ := f.Entry(2); e.Bell != 1 {
		t.Errorf("bell %d after the ring", e.Bell)
	}
}

func FuzzDecodeReport(f *testing.F) {
	f.Add(ReportSpec{Entries: map[int]Entry{0: {Join: Join{Grant: 1, Joins: 1}, Want: 1}}}.Bytes())
	f.Add(make([]byte, FileSize))
	f.Add([]byte("LBREPORT"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeReport(b)
		if err != nil {
			return
		}
		// Decoding is total and exact: rendering the decoded entries gives the same words.
		back := ReportSpec{Entries: map[int]Entry{}}
		for i, e := range r.GPU {
			back.Entries[i] = e
		}
		r2, err := DecodeReport(back.Bytes())
		if err != nil || r2 != r {
			t.Fatalf("re-decoding changed the report: %v", err)
		}
	})
}

// The node loop waits on a bell without its GPU's lock while a replaced report is closed under it:
// Close waits for the wait (never unmaps under it), and a wait or a read after Close is an error,
// not a fault (-race sees the ordering).
func TestReportCloseDuringWaitBell(t *testing.T) {
	f, err := OpenReport(writeFile(t, ReportSpec{}.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error)
	go func() { waiting <- f.WaitBell(1, 0, 200*time.Millisecond) }()
	time.Sleep(20 * time.Millisecond)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err != nil {
		t.Errorf("the wait under Close: %v", err)
	}
	if err := f.WaitBell(1, 0, time.Millisecond); err == nil {
		t.Error("WaitBell after Close returned no error")
	}
	if _, err := f.Entry(1); err == nil {
		t.Error("Entry after Close returned no error")
	}
}

// A report whose library keeps live locks says whether a joiner that did not drain is alive: the
// kernel's record of the locks, not a word the container writes. Without the feature, or with
// every joiner drained, nothing is asked.
func TestReportLiveLocks(t *testing.T) {
	joined := Join{Grant: 7, Joins: 2, Drains: 1}
	path := writeFile(t, ReportSpec{Features: FeatureLive, Entries: map[int]Entry{
		3: {Join: joined}, 4: {Join: Join{Grant: 7, Joins: 1, Drains: 1}}}}.Bytes())
	f, err := OpenReport(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e, err := f.Entry(3)
	if err != nil || !e.LiveLocks || e.Live || !e.Gone(7) || e.Gone(8) {
		t.Fatalf("no lock held: %+v %v, want live locks, not live, gone for slice 7 only", e, err)
	}
	// A process of the container holding the byte's shared lock (its own description).
	h, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	lk := unix.Flock_t{Type: unix.F_RDLCK, Start: int64(LiveByte(3)), Len: 1}
	if err := unix.FcntlFlock(h.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Fatal(err)
	}
	if e, _ := f.Entry(3); !e.Live || e.Gone(7) {
		t.Errorf("lock held: %+v, want live", e)
	}
	if e, _ := f.Entry(4); e.Live || e.Gone(7) {
		t.Errorf("drained entry: %+v, want neither live nor gone (nothing to ask)", e)
	}
	h.Close() // the description's last reference: the kernel drops the lock, as at a death
	if e, _ := f.Entry(3); e.Live || !e.Gone(7) {
		t.Errorf("lock dropped: %+v, want gone", e)
	}

	old := writeFile(t, ReportSpec{Entries: map[int]Entry{3: {Join: joined}}}.Bytes())
	g, err := OpenReport(old)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if e, _ := g.Entry(3); e.LiveLocks || e.Gone(7) {
		t.Errorf("a library without live locks: %+v, want never gone", e)
	}
}

// mappedGrant writes a one-GPU grant file and maps it (unmapped at the test's end): its path, its
// bytes, the mapping.
func mappedGrant(t *testing.T) (string, []byte, *GrantFile) {
	t.Helper()
	b, err := GrantSpec{GPUs: []UUID{gpuA}, Period: 100 * time.Millisecond}.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, b)
	g, err := OpenGrant(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return p, b, g
}

// A grant file removed while mapped is put back at its path, a copy of what it says, and every
// write from then on reaches both: the processes that mapped the first and those that map the copy.
func TestGrantFileRestore(t *testing.T) {
	p, b, g := mappedGrant(t)
	g.Set(0, Run, 7, 30*time.Millisecond)
	if g.Gone() || g.Replaced() {
		t.Fatal("in place: gone or replaced")
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if !g.Gone() {
		t.Fatal("removed: not gone")
	}
	if err := g.Restore(); err != nil {
		t.Fatal(err)
	}
	if g.Gone() || g.Replaced() {
		t.Error("restored: gone or replaced")
	}
	read := func() State {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		_, words, err := DecodeGrant(data)
		if err != nil {
			t.Fatal(err)
		}
		_, s := SplitWord(words[0])
		return s
	}
	if s := read(); s != Run {
		t.Errorf("restored file says %v, want the mapping's run", s)
	}
	g.Set(0, Wait, 0, 0)
	if s := read(); s != Wait {
		t.Errorf("after a write: the restored file says %v, want wait", s)
	}
	if _, s := g.Load(0); s != Wait {
		t.Errorf("after a write: the first mapping says %v, want wait", s)
	}
	if err := os.WriteFile(p+".new", b, 0o644); err != nil { // the plugin publishes a new one
		t.Fatal(err)
	}
	if err := os.Rename(p+".new", p); err != nil {
		t.Fatal(err)
	}
	if !g.Replaced() {
		t.Error("a new file at the path: not replaced")
	}
}

// The node's scan restores a removed grant file while the GPU's loop writes it: the mirror is
// swapped and the old one unmapped under a lock the writers hold, never under a write (the race
// detector saw the scan's Restore beside the loop's BeatAllowed; an unmapped mirror written would
// crash the scheduler).
func TestGrantFileRestoreWhileWritten(t *testing.T) {
	p, _, g := mappedGrant(t)
	stop, started := make(chan struct{}), make(chan struct{})
	done := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				done <- n
				return
			default:
			}
			g.Set(0, Run, uint32(n), time.Millisecond)
			g.BeatAllowed(0, time.Duration(n)*time.Microsecond)
			g.Beat(0)
			g.SetPeriod(100 * time.Millisecond)
			_ = g.Replaced()
			if n++; n == 1 {
				started <- struct{}{}
			}
		}
	}()
	<-started // the restores run beside its writes, not before the writer is scheduled
	for i := 0; i < 50; i++ {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := g.Restore(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if n := <-done; n == 0 {
		t.Fatal("the writer never wrote")
	}
	if _, s := g.Load(0); s != Run {
		t.Errorf("the mapping says %v, want run", s)
	}
}
