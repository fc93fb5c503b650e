// Package safefile opens and reads files that a container can write, from
// a node process (the monitor, the device plugin), without letting the
// container choose what is opened or how long the read takes.
//
// A tenant who is root in its container owns everything in its cache
// directory: it can put a FIFO there (a plain open blocks until a writer
// appears), a symlink to any host file, a device node (opening it runs the
// driver's open), or a huge or sparse file. Open therefore never follows
// the last component, never opens anything but a regular file, and checks
// the size before a byte is read.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Reason classifies a rejected file, for metrics and logs.
type Reason string

// Reasons a file is rejected.
const (
	ReasonMissing    Reason = "missing"     // nothing at the path
	ReasonSymlink    Reason = "symlink"     // the path is a symbolic link
	ReasonNotRegular Reason = "not_regular" // FIFO, socket, device, directory
	ReasonSize       Reason = "size"        // not the size the reader expects
	ReasonIO         Reason = "io"          // open or read failed otherwise
)

// Error is a rejected or unreadable file. Its message names the path.
type Error struct {
	Path   string
	Reason Reason
	Err    error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s: %v", e.Path, e.Reason, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// ReasonOf returns the Reason of err, or ReasonIO when err is not an *Error.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonIO
}

// Size bounds what Open accepts: Min <= size <= Max, and one of Only when
// Only is not empty (a format with a few fixed layouts).
type Size struct {
	Min, Max int64
	Only     []int64
}

// Exactly is a Size of one value.
func Exactly(n int64) Size { return OneOf(n) }

// OneOf accepts any of sizes.
func OneOf(sizes ...int64) Size {
	s := Size{Min: sizes[0], Max: sizes[0], Only: sizes}
	for _, n := range sizes {
		s.Min, s.Max = min(s.Min, n), max(s.Max, n)
	}
	return s
}

func (s Size) ok(n int64) bool {
	if n < s.Min || n > s.Max {
		return false
	}
	if len(s.Only) == 0 {
		return true
	}
	for _, o := range s.Only {
		if n == o {
			return true
		}
	}
	return false
}

// Open opens path read-only if it is a regular file (not a symlink to one)
// whose size is within want. The check happens on an O_PATH descriptor,
// which opens nothing: no FIFO blocks and no device driver runs. The file
// is then reopened through that descriptor, so what was checked is what is
// read, whatever the container renames in between. The returned file is
// non-blocking; its size is st.Size().
func Open(path string, want Size) (*os.File, os.FileInfo, error) {
	return open(path, want, unix.O_RDONLY)
}

// OpenReadWrite is Open for a file the node writes into (the monitor's
// compute-policy switch in a usage region): the same checks, then the same
// inode reopened read-write, non-blocking.
func OpenReadWrite(path string, want Size) (*os.File, os.FileInfo, error) {
	return open(path, want, unix.O_RDWR)
}

func open(path string, want Size, mode int) (*os.File, os.FileInfo, error) {
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, classifyOpen(path, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, nil, &Error{Path: path, Reason: ReasonIO, Err: fmt.Errorf("fstat: %w", err)}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFLNK:
		// O_PATH|O_NOFOLLOW opens the link itself rather than failing.
		return nil, nil, &Error{Path: path, Reason: ReasonSymlink, Err: errors.New("is a symbolic link; not followed")}
	default:
		return nil, nil, &Error{Path: path, Reason: ReasonNotRegular, Err: fmt.Errorf("file type %#o is not a regular file", st.Mode&unix.S_IFMT)}
	}
	if !want.ok(st.Size) {
		return nil, nil, &Error{Path: path, Reason: ReasonSize, Err: fmt.Errorf("size %d, want %s", st.Size, want)}
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), mode|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, &Error{Path: path, Reason: ReasonIO, Err: fmt.Errorf("reopen: %w", err)}
	}
	f := os.NewFile(uintptr(fd), path)
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, &Error{Path: path, Reason: ReasonIO, Err: fmt.Errorf("fstat: %w", err)}
	}
	// Same inode as checked, but it may have grown or shrunk since.
	if !fi.Mode().IsRegular() || !want.ok(fi.Size()) {
		f.Close()
		return nil, nil, &Error{Path: path, Reason: ReasonSize, Err: fmt.Errorf("size %d after reopening, want %s", fi.Size(), want)}
	}
	return f, fi, nil
}

// ReadAll reads at most want.Max bytes of f; a file that delivers a length
// want does not accept (it changed after Open) is an error.
func ReadAll(f *os.File, want Size) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(f, want.Max+1))
	if err != nil {
		return nil, &Error{Path: f.Name(), Reason: ReasonIO, Err: fmt.Errorf("read: %w", err)}
	}
	if !want.ok(int64(len(b))) {
		return nil, &Error{Path: f.Name(), Reason: ReasonSize, Err: fmt.Errorf("read %d bytes, want %s", len(b), want)}
	}
	return b, nil
}

// ReadFile is Open and ReadAll.
func ReadFile(path string, want Size) ([]byte, error) {
	f, _, err := Open(path, want)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadAll(f, want)
}

func (s Size) String() string {
	if len(s.Only) == 1 {
		return fmt.Sprintf("exactly %d bytes", s.Min)
	}
	if len(s.Only) > 1 {
		return fmt.Sprintf("one of %v bytes", s.Only)
	}
	return fmt.Sprintf("%d..%d bytes", s.Min, s.Max)
}

func classifyOpen(path string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return &Error{Path: path, Reason: ReasonMissing, Err: err}
	case errors.Is(err, unix.ELOOP):
		return &Error{Path: path, Reason: ReasonSymlink, Err: fmt.Errorf("is a symbolic link; not followed: %w", err)}
	}
	return &Error{Path: path, Reason: ReasonIO, Err: fmt.Errorf("open: %w", err)}
}
