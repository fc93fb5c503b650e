package schedproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// GrantSpec is what the device plugin records in a new grant file: the container's GPUs in its
// device order. Every entry starts Off (sequence 0): until a scheduler drives it, the library
// paces alone.
type GrantSpec struct {
	GPUs   []UUID
	Period time.Duration // the scheduler's period, for the library's log; 0 = not known yet
}

// Bytes renders a new grant file: every entry Wait.
func (s GrantSpec) Bytes() ([]byte, error) {
	if len(s.GPUs) == 0 || len(s.GPUs) > MaxGPUs {
		return nil, fmt.Errorf("grant file: %d GPUs, want 1..%d", len(s.GPUs), MaxGPUs)
	}
	b := make([]byte, FileSize)
	ne := binary.NativeEndian
	ne.PutUint64(b[offMagic:], GrantMagic)
	ne.PutUint32(b[offVersion:], Version)
	ne.PutUint32(b[offNGPUs:], uint32(len(s.GPUs)))
	ne.PutUint32(b[offPeriod:], uint32(min(s.Period.Microseconds(), 1<<32-1)))
	for i, u := range s.GPUs {
		if u.IsZero() {
			return nil, fmt.Errorf("grant file: GPU %d has no UUID", i)
		}
		copy(b[entries+i*entrySize+offUUID:], u[:])
		// Wait, with a heartbeat that has not moved: the library waits for the scheduler's first
		// word (its scan finds the file within 200 ms) rather than pacing itself meanwhile, and
		// paces itself after 0.5 s if no scheduler comes.
		ne.PutUint32(b[entries+i*entrySize+offWord:], Word(0, Wait))
	}
	return b, nil
}

// GrantFile is a grant file mapped read-write by the scheduler (the node's own file: the container
// sees it only through a read-only mount).
type GrantFile struct {
	Path string
	mem  []byte
	gpus []UUID
	dev  uint64
	ino  uint64
	// mirror is the file Restore put back at Path: every write goes to both (the container's
	// running processes hold the first, the ones it starts later map the mirror). mu guards it:
	// the node's scan restores the file while the GPU loops write it, and a mirror is unmapped
	// only when no write is in it.
	mu     sync.RWMutex
	mirror *GrantFile
}

// withMirror runs f on the mirror, if there is one, while it cannot be replaced or unmapped.
func (g *GrantFile) withMirror(f func(m *GrantFile)) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.mirror != nil {
		f(g.mirror)
	}
}

// OpenGrant maps the grant file at path after checking that it is one (a regular file of
// FileSize bytes with the grant magic, version and 1..MaxGPUs GPUs).
func OpenGrant(path string) (*GrantFile, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("grant file %s: fstat: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != FileSize {
		return nil, fmt.Errorf("grant file %s: not a %d-byte regular file", path, FileSize)
	}
	mem, err := unix.Mmap(fd, 0, FileSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("grant file %s: mmap: %w", path, err)
	}
	g := &GrantFile{Path: path, mem: mem, dev: uint64(st.Dev), ino: st.Ino}
	ne := binary.NativeEndian
	n := ne.Uint32(mem[offNGPUs:])
	switch {
	case ne.Uint64(mem[offMagic:]) != GrantMagic:
		err = fmt.Errorf("grant file %s: bad magic %#x", path, ne.Uint64(mem[offMagic:]))
	case ne.Uint32(mem[offVersion:]) != Version:
		err = fmt.Errorf("grant file %s: version %d, this scheduler reads %d", path, ne.Uint32(mem[offVersion:]), Version)
	case n == 0 || n > MaxGPUs:
		err = fmt.Errorf("grant file %s: %d GPUs, want 1..%d", path, n, MaxGPUs)
	}
	if err != nil {
		_ = unix.Munmap(mem)
		return nil, err
	}
	for i := range int(n) {
		var u UUID
		copy(u[:], mem[entries+i*entrySize+offUUID:])
		g.gpus = append(g.gpus, u)
	}
	return g, nil
}

// GPUs are the container's GPUs, in its device order (entry i is GPU i).
func (g *GrantFile) GPUs() []UUID { return g.gpus }

func (g *GrantFile) word(i int) *uint32 {
	return (*uint32)(unsafe.Pointer(&g.mem[entries+i*entrySize+offWord]))
}

// Load returns entry i's sequence and state.
func (g *GrantFile) Load(i int) (seq uint32, s State) { return SplitWord(atomic.LoadUint32(g.word(i))) }

// Set gives entry i state s (for Run and Free, as slice grantID lasting budget (0: until
// revoked), both written before the word), bumps the sequence and wakes the container's launchers
// waiting on the word.
func (g *GrantFile) Set(i int, s State, grantID uint32, budget time.Duration) {
	if s == Run || s == Free {
		atomic.StoreUint32((*uint32)(unsafe.Pointer(&g.mem[entries+i*entrySize+offGrantID])), grantID)
		atomic.StoreUint32((*uint32)(unsafe.Pointer(&g.mem[entries+i*entrySize+offBudget])), uint32(min(max(budget.Microseconds(), 0), 1<<32-1)))
	}
	w := g.word(i)
	seq, _ := SplitWord(atomic.LoadUint32(w))
	atomic.StoreUint32(w, Word(seq+1, s))
	futexWakeAll(w)
	g.withMirror(func(m *GrantFile) { m.Set(i, s, grantID, budget) })
}

// Beat bumps entry i's heartbeat, which tells the library the scheduler still drives the entry.
// The word is left alone: a launcher holding its slice compares the word only.
func (g *GrantFile) Beat(i int) {
	atomic.AddUint32((*uint32)(unsafe.Pointer(&g.mem[entries+i*entrySize+offBeat])), 1)
	g.withMirror(func(m *GrantFile) { m.Beat(i) })
}

// Allowed returns entry i's allowed time (allowed_us, sched.h): what a scheduler that drove the
// file before recorded, for its successor to go on from.
func (g *GrantFile) Allowed(i int) time.Duration {
	return time.Duration(atomic.LoadUint64(g.allowed(i))) * time.Microsecond
}

// BeatAllowed records entry i's allowed time, stamps it with the beat about to be written and
// beats (Beat): a reader trusts the allowed time while its stamp keeps up with the beat.
func (g *GrantFile) BeatAllowed(i int, allowed time.Duration) {
	atomic.StoreUint64(g.allowed(i), uint64(max(allowed.Microseconds(), 0)))
	beat := (*uint32)(unsafe.Pointer(&g.mem[entries+i*entrySize+offBeat]))
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&g.mem[entries+i*entrySize+offStamp])), atomic.LoadUint32(beat)+1)
	atomic.AddUint32(beat, 1)
	g.withMirror(func(m *GrantFile) { m.BeatAllowed(i, allowed) })
}

func (g *GrantFile) allowed(i int) *uint64 {
	return (*uint64)(unsafe.Pointer(&g.mem[entries+i*entrySize+offAllowed]))
}

// Beats returns entry i's heartbeat.
func (g *GrantFile) Beats(i int) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&g.mem[entries+i*entrySize+offBeat])))
}

// SetPeriod records the scheduler's period in the header.
func (g *GrantFile) SetPeriod(d time.Duration) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&g.mem[offPeriod])), uint32(min(d.Microseconds(), 1<<32-1)))
	g.withMirror(func(m *GrantFile) { m.SetPeriod(d) })
}

// Replaced reports whether Path now names another file (the plugin re-allocated the container and
// published a new grant file) or none.
func (g *GrantFile) Replaced() bool {
	mirrored, replaced := false, false
	g.withMirror(func(m *GrantFile) { mirrored, replaced = true, m.Replaced() })
	if mirrored {
		return replaced
	}
	var st unix.Stat_t
	if err := unix.Lstat(g.Path, &st); err != nil {
		return true
	}
	return uint64(st.Dev) != g.dev || st.Ino != g.ino
}

// Gone reports whether nothing is at Path any more (removed, not replaced).
func (g *GrantFile) Gone() bool {
	_, err := os.Lstat(g.Path)
	return errors.Is(err, fs.ErrNotExist)
}

// Restore puts the file back at Path when it was removed there while mapped: a copy of what it
// says now, published atomically (written aside, renamed into place), driven from then on with it
// (Set, Beat… write both). The container's running processes keep the file they mapped; those it
// starts later find the copy.
func (g *GrantFile) Restore() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mirror != nil {
		_ = g.mirror.Close()
		g.mirror = nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(g.Path), ".restore-*")
	if err != nil {
		return fmt.Errorf("restore grant file %s: %w", g.Path, err)
	}
	b := make([]byte, FileSize)
	copy(b, g.mem)
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), g.Path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("restore grant file %s: %w", g.Path, err)
	}
	m, err := OpenGrant(g.Path)
	if err != nil {
		return fmt.Errorf("restore grant file %s: %w", g.Path, err)
	}
	g.mirror = m
	return nil
}

// Close unmaps the file (and its restored copy).
func (g *GrantFile) Close() error {
	if g.mem == nil {
		return nil
	}
	err := unix.Munmap(g.mem)
	g.mem = nil
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mirror != nil {
		if merr := g.mirror.Close(); err == nil {
			err = merr
		}
		g.mirror = nil
	}
	return err
}

// DecodeGrant reads a grant file's bytes (tools and tests; the scheduler maps it).
func DecodeGrant(b []byte) (gpus []UUID, words []uint32, err error) {
	if len(b) != FileSize {
		return nil, nil, fmt.Errorf("grant file: %d bytes, want %d", len(b), FileSize)
	}
	ne := binary.NativeEndian
	if ne.Uint64(b[offMagic:]) != GrantMagic || ne.Uint32(b[offVersion:]) != Version {
		return nil, nil, fmt.Errorf("grant file: magic %#x version %d, want %#x version %d",
			ne.Uint64(b[offMagic:]), ne.Uint32(b[offVersion:]), uint64(GrantMagic), Version)
	}
	n := ne.Uint32(b[offNGPUs:])
	if n == 0 || n > MaxGPUs {
		return nil, nil, fmt.Errorf("grant file: %d GPUs, want 1..%d", n, MaxGPUs)
	}
	for i := range int(n) {
		var u UUID
		copy(u[:], b[entries+i*entrySize+offUUID:])
		gpus = append(gpus, u)
		words = append(words, ne.Uint32(b[entries+i*entrySize+offWord:]))
	}
	return gpus, words, nil
}
