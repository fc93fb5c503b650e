package schedproto

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The grant file as a reader other than the scheduler sees it: the node's monitor, which holds
// what the driver says each container's processes did on a GPU to the time the scheduler allowed
// the container there (allowed_us, sched.h). The file is the node's (root's, outside every
// container's writable directory); it is still checked as the scheduler checks it.

// Grant is a grant file read whole.
type Grant struct {
	Period time.Duration
	GPU    []GrantEntry // the container's GPUs, in its device order
}

// GrantEntry is one GPU's entry.
type GrantEntry struct {
	UUID  UUID
	Seq   uint32
	State State
	Beat  uint32
	// Allowed is allowed_us: the time the container was allowed to run work on the GPU, kept by
	// the scheduler while Counting.
	Allowed     time.Duration
	AllowedBeat uint32
}

// Counting reports whether the scheduler that beats the entry keeps its allowed time: the stamp
// keeps up with the beat (one behind while a beat is being written). A scheduler that predates
// the field beats and leaves the stamp 0.
func (e GrantEntry) Counting() bool {
	return e.AllowedBeat != 0 && e.Beat-e.AllowedBeat <= 1
}

// ParseGrant decodes a grant file's bytes: a FileSize file with the grant magic and version and
// 1..MaxGPUs entries, each with a UUID.
func ParseGrant(b []byte) (Grant, error) {
	if len(b) != FileSize {
		return Grant{}, fmt.Errorf("grant file: %d bytes, want %d", len(b), FileSize)
	}
	ne := binary.NativeEndian
	if m, v := ne.Uint64(b[offMagic:]), ne.Uint32(b[offVersion:]); m != GrantMagic || v != Version {
		return Grant{}, fmt.Errorf("grant file: magic %#x version %d, want %#x version %d", m, v, uint64(GrantMagic), Version)
	}
	n := ne.Uint32(b[offNGPUs:])
	if n == 0 || n > MaxGPUs {
		return Grant{}, fmt.Errorf("grant file: %d GPUs, want 1..%d", n, MaxGPUs)
	}
	g := Grant{Period: time.Duration(ne.Uint32(b[offPeriod:])) * time.Microsecond}
	for i := range int(n) {
		e := b[entries+i*entrySize : entries+(i+1)*entrySize]
		var ge GrantEntry
		copy(ge.UUID[:], e[offUUID:])
		if ge.UUID.IsZero() {
			return Grant{}, fmt.Errorf("grant file: GPU %d has no UUID", i)
		}
		ge.Seq, ge.State = SplitWord(ne.Uint32(e[offWord:]))
		ge.Beat = ne.Uint32(e[offBeat:])
		us := ne.Uint64(e[offAllowed:])
		if us > uint64(maxAllowed/time.Microsecond) {
			return Grant{}, fmt.Errorf("grant file: GPU %d: allowed time %d µs is out of range", i, us)
		}
		ge.Allowed = time.Duration(us) * time.Microsecond
		ge.AllowedBeat = ne.Uint32(e[offStamp:])
		g.GPU = append(g.GPU, ge)
	}
	return g, nil
}

// maxAllowed bounds allowed_us on reading: a century, far beyond any container's life, and well
// inside a time.Duration.
const maxAllowed = 100 * 365 * 24 * time.Hour

// ReadGrant reads the grant file at path: a regular file of FileSize bytes (a symlink is not
// followed), mapped and read word by word with atomic loads, so each word is one the scheduler
// wrote whole (allowed_us among them), then decoded by ParseGrant.
func ReadGrant(path string) (Grant, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return Grant{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Grant{}, fmt.Errorf("grant file %s: fstat: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != FileSize {
		return Grant{}, fmt.Errorf("grant file %s: not a %d-byte regular file", path, FileSize)
	}
	mem, err := unix.Mmap(fd, 0, FileSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return Grant{}, fmt.Errorf("grant file %s: mmap: %w", path, err)
	}
	defer unix.Munmap(mem)
	b := make([]byte, FileSize)
	if err := touch(func() error {
		for o := 0; o < structSize; o += 8 {
			binary.NativeEndian.PutUint64(b[o:], atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[o]))))
		}
		return nil
	}); err != nil {
		return Grant{}, fmt.Errorf("grant file %s: %w", path, err)
	}
	g, err := ParseGrant(b)
	if err != nil {
		return Grant{}, fmt.Errorf("%s: %w", path, err)
	}
	return g, nil
}
