package schedproto

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/limitbed/limitbed/plugin/internal/safefile"
)

// Entry is one GPU's entry of a container's report.
type Entry struct {
	Join   Join
	Want   uint32 // changes while a launcher waits for the slice
	Active uint32 // the grant sequence a launching process last saw
	Bell   uint32 // changes after every drain
	// LiveLocks: the container's library keeps live locks (FeatureLive). Then Live says whether
	// a process that joined the entry's slice and did not report its drain is still alive (read
	// only while the join word counts one: false when it does not).
	LiveLocks, Live bool
}

// Gone reports whether every process that joined slice g and did not report its drain is dead:
// its work left the GPU with it (the driver drops a dead process's queue). Only a container whose
// library keeps live locks can say so.
func (e Entry) Gone(g uint32) bool {
	return e.LiveLocks && e.Join.Grant == g && e.Join.Joins != e.Join.Drains && !e.Live
}

// Report is a decoded report file.
type Report struct {
	GPU [MaxGPUs]Entry
}

// DecodeReport reads a report file's bytes. Anything but a FileSize-byte file with the report
// magic and version is refused; the words themselves have no invalid values (a lie in them can
// only change what is decided for the container that wrote it).
func DecodeReport(b []byte) (Report, error) {
	var r Report
	if len(b) != FileSize {
		return r, fmt.Errorf("report: %d bytes, want %d", len(b), FileSize)
	}
	ne := binary.NativeEndian
	if m, v := ne.Uint64(b[offMagic:]), ne.Uint32(b[offVersion:]); m != ReportMagic || v != Version {
		return r, fmt.Errorf("report: magic %#x version %d, want %#x version %d", m, v, uint64(ReportMagic), Version)
	}
	live := ne.Uint32(b[offFeatures:])&FeatureLive != 0
	for i := range MaxGPUs {
		e := b[entries+i*entrySize:]
		r.GPU[i] = Entry{
			Join:      DecodeJoin(ne.Uint64(e[offJoin:])),
			Want:      ne.Uint32(e[offWant:]),
			Active:    ne.Uint32(e[offActive:]),
			Bell:      ne.Uint32(e[offBell:]),
			LiveLocks: live, // whether a joiner lives is the kernel's to say, not the bytes'
		}
	}
	return r, nil
}

// ReportFile is a container's report file mapped read-only.
type ReportFile struct {
	Path string
	// mu orders Close against a WaitBell in progress on another goroutine (the node loop waits
	// on a bell without its GPU's lock; a replaced report is closed under it): the mapping is
	// never unmapped under a wait.
	mu  sync.RWMutex
	mem []byte
	f   *os.File // kept open to ask the kernel about the live locks (F_OFD_GETLK)
	dev uint64
	ino uint64
}

// OpenReport maps the report at path: a regular file (not a symlink, FIFO or device) of exactly
// FileSize bytes, opened without blocking (plugin/internal/safefile).
func OpenReport(path string) (*ReportFile, error) {
	f, fi, err := safefile.Open(path, safefile.Exactly(FileSize))
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		_ = f.Close()
		return nil, fmt.Errorf("report %s: no stat", path)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, FileSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("report %s: mmap: %w", path, err)
	}
	return &ReportFile{Path: path, mem: mem, f: f, dev: uint64(st.Dev), ino: st.Ino}, nil
}

// Entry reads GPU i's entry. The file is the container's, which may truncate it under the
// mapping: the read then faults, and the fault is this call's error, not the process's end.
func (r *ReportFile) Entry(i int) (e Entry, err error) {
	if i < 0 || i >= MaxGPUs {
		return e, fmt.Errorf("report %s: GPU %d out of range", r.Path, i)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.mem == nil {
		return e, fmt.Errorf("report %s: closed", r.Path)
	}
	err = touch(func() error {
		if m := atomic.LoadUint64((*uint64)(unsafe.Pointer(&r.mem[offMagic]))); m != ReportMagic {
			return fmt.Errorf("report %s: magic %#x", r.Path, m)
		}
		if v := atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.mem[offVersion]))); v != Version {
			return fmt.Errorf("report %s: version %d", r.Path, v)
		}
		b := entries + i*entrySize
		e = Entry{
			Join:   DecodeJoin(atomic.LoadUint64((*uint64)(unsafe.Pointer(&r.mem[b+offJoin])))),
			Want:   atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.mem[b+offWant]))),
			Active: atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.mem[b+offActive]))),
			Bell:   atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.mem[b+offBell]))),
		}
		e.LiveLocks = atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.mem[offFeatures])))&FeatureLive != 0
		return nil
	})
	if err == nil && e.LiveLocks && e.Join.Joins != e.Join.Drains {
		e.Live = r.live(i) // read after the join word: a joiner locks before it counts itself in
	}
	return e, err
}

// live asks the kernel whether any process holds a lock on GPU i's live byte. A question that
// fails is answered yes: the slice is taken for still running (charged), never for gone.
func (r *ReportFile) live(i int) bool {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(LiveByte(i)), Len: 1}
	if err := unix.FcntlFlock(r.f.Fd(), unix.F_OFD_GETLK, &lk); err != nil {
		return true
	}
	return lk.Type != unix.F_UNLCK
}

// WaitBell sleeps until GPU i's bell is no longer old, at most d (the container rings it after a
// drain). A container that rings it needlessly only wakes the wait for its own drain.
func (r *ReportFile) WaitBell(i int, old uint32, d time.Duration) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.mem == nil {
		return fmt.Errorf("report %s: closed", r.Path)
	}
	return futexWaitOn((*uint32)(unsafe.Pointer(&r.mem[entries+i*entrySize+offBell])), old, d)
}

// Replaced reports whether Path now names another file, or none (the container may replace it).
func (r *ReportFile) Replaced() bool {
	var st unix.Stat_t
	if err := unix.Lstat(r.Path, &st); err != nil {
		return true
	}
	return uint64(st.Dev) != r.dev || st.Ino != r.ino
}

// Close unmaps the file.
func (r *ReportFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// touch runs f, turning a fault on a mapping (SIGBUS: the file was truncated) into an error.
func touch(f func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			err = fmt.Errorf("the file changed under its mapping: %v", r)
		}
	}()
	return f()
}

// ReportSpec renders a report file's bytes, the library's side, for tests of readers.
type ReportSpec struct {
	Entries  map[int]Entry
	Magic    uint64 // 0 = ReportMagic
	Features uint32
}

// Bytes renders the spec.
func (s ReportSpec) Bytes() []byte {
	b := make([]byte, FileSize)
	ne := binary.NativeEndian
	m := s.Magic
	if m == 0 {
		m = ReportMagic
	}
	ne.PutUint64(b[offMagic:], m)
	ne.PutUint32(b[offVersion:], Version)
	ne.PutUint32(b[offFeatures:], s.Features)
	for i, e := range s.Entries {
		o := b[entries+i*entrySize:]
		ne.PutUint64(o[offJoin:], e.Join.Encode())
		ne.PutUint32(o[offWant:], e.Want)
		ne.PutUint32(o[offActive:], e.Active)
		ne.PutUint32(o[offBell:], e.Bell)
	}
	return b
}
