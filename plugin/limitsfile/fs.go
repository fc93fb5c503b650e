package limitsfile

import (
	"io/fs"
	"os"
)

// File is the part of *os.File the atomic writer uses.
type File interface {
	Name() string
	Write(p []byte) (int, error)
	Sync() error
	Chmod(mode fs.FileMode) error
	Close() error
}

// FS is the filesystem seam of the atomic writer. Every step that can fail
// on a real node (create, write, fsync, chmod, rename, directory fsync) goes
// through it, so tests can fail or kill the writer at each one.
type FS interface {
	// CreateTemp creates a new file in dir; the last "*" in pattern is
	// replaced by a random string (os.CreateTemp semantics).
	CreateTemp(dir, pattern string) (File, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	// SyncDir fsyncs a directory so a rename inside it survives a crash.
	SyncDir(dir string) error
	// ReadDirNames lists the names in dir.
	ReadDirNames(dir string) ([]string, error)
}

// OSFS is the real filesystem.
type OSFS struct{}

var _ FS = OSFS{}

// CreateTemp implements FS.
func (OSFS) CreateTemp(dir, pattern string) (File, error) { return os.CreateTemp(dir, pattern) }

// Rename implements FS.
func (OSFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// SyncDir implements FS.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := d.Sync()
	cerr := d.Close()
	if serr != nil {
		return serr
	}
	return cerr
}

// ReadDirNames implements FS.
func (OSFS) ReadDirNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}
