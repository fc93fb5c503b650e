package schedproto

import (
	"encoding/binary"
	"fmt"
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
	for i := range MaxGPUs {
		e := b[entries+i*entrySize:]
		r.GPU[i] = Entry{
			Join:   DecodeJoin(ne.Uint64(e[offJoin:])),
			Want:   ne.Uint32(e[offWant:]),
			Active: ne.Uint32(e[offActive:]),
			Bell:   ne.Uint32(e[offBell:]),
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
	defer f.Close()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fmt.Errorf("report %s: no stat", path)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, FileSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("report %s: mmap: %w", path, err)
	}
	return &ReportFile{Path: path, mem: mem, dev: uint64(st.Dev), ino: st.Ino}, nil
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
		return nil
	})
	return e, err
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
	Entries map[int]Entry
	Magic   uint64 // 0 = ReportMagic
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
	for i, e := range s.Entries {
		o := b[entries+i*entrySize:]
		ne.PutUint64(o[offJoin:], e.Join.Encode())
		ne.PutUint32(o[offWant:], e.Want)
		ne.PutUint32(o[offActive:], e.Active)
		ne.PutUint32(o[offBell:], e.Bell)
	}
	return b
}
