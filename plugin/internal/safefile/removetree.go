package safefile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// RemoveTree removes path and everything under it, as a container may have
// shaped it: a chain of directories deeper than the process's file
// descriptor limit or than PATH_MAX, symlinks to anything, FIFOs, device
// nodes. It holds at most three descriptors whatever the depth (os.RemoveAll
// keeps one open per level, so a deep enough chain is never removed), never
// follows a symlink (a link is unlinked, its target untouched), never opens
// anything but directories, and never crosses into another file system (a
// mount point inside the tree is an error, not removed). An absent path is
// not an error. The parent of path is trusted (a node directory); only what
// is below it is the container's.
func RemoveTree(path string) error {
	parent, err := unix.Open(filepath.Dir(path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("remove %s: open parent: %w", path, err)
	}
	defer unix.Close(parent)
	if err := removeAt(parent, filepath.Base(path)); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// removeAt removes name in the directory parent. It walks down one
// directory at a time (closing the one above), empties it, climbs back
// through "..", and removes the emptied directory by its inode number, so
// neither descriptors nor memory grow with the depth.
func removeAt(parent int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unlink(parent, name, 0)
	}
	dev := st.Dev
	cur, err := openDir(parent, name)
	if err != nil {
		return err
	}
	depth := 0
	for {
		sub, err := emptyFiles(cur, dev)
		if err != nil {
			unix.Close(cur)
			return err
		}
		if sub != "" {
			child, err := openDir(cur, sub)
			unix.Close(cur)
			if err != nil {
				return err
			}
			cur, depth = child, depth+1
			continue
		}
		if depth == 0 {
			unix.Close(cur)
			return unlink(parent, name, unix.AT_REMOVEDIR)
		}
		var self unix.Stat_t
		if err := unix.Fstat(cur, &self); err != nil {
			unix.Close(cur)
			return err
		}
		up, err := unix.Openat(cur, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(cur)
		if err != nil {
			return fmt.Errorf("climb out of a directory: %w", err)
		}
		if err := removeByInode(up, self.Ino); err != nil {
			unix.Close(up)
			return err
		}
		cur, depth = up, depth-1
	}
}

func openDir(dirfd int, name string) (int, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("open directory %q: %w", name, err)
	}
	return fd, nil
}

func unlink(dirfd int, name string, flags int) error {
	if err := unix.Unlinkat(dirfd, name, flags); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unlink %q: %w", name, err)
	}
	return nil
}

// direntBuf is the getdents buffer: one batch of entries at a time.
const direntBuf = 32 << 10

// dirent is one entry of a getdents64 batch.
type dirent struct {
	ino  uint64
	typ  uint8
	name string
}

// forEachEntry calls f for every entry of dirfd but "." and "..", reading
// from the descriptor's current offset; f returns false to stop.
func forEachEntry(dirfd int, f func(dirent) (bool, error)) error {
	buf := make([]byte, direntBuf)
	for {
		n, err := unix.Getdents(dirfd, buf)
		if err != nil {
			return fmt.Errorf("read directory: %w", err)
		}
		if n <= 0 {
			return nil
		}
		for off := 0; off < n; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			if off+19 > n {
				return errors.New("read directory: truncated entry")
			}
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen < 19 || off+reclen > n {
				return errors.New("read directory: bad entry length")
			}
			nameb := buf[off+19 : off+reclen]
			for i, c := range nameb {
				if c == 0 {
					nameb = nameb[:i]
					break
				}
			}
			d := dirent{ino: binary.NativeEndian.Uint64(buf[off:]), typ: buf[off+18], name: string(nameb)}
			off += reclen
			if d.name == "." || d.name == ".." {
				continue
			}
			more, err := f(d)
			if err != nil || !more {
				return err
			}
		}
	}
}

// emptyFiles unlinks every entry of dirfd that is not a directory (symlinks
// included, never followed) and returns the name of one subdirectory, or ""
// when none is left. A subdirectory on another device (a mount point) is an
// error: it is not the container's to have us remove.
func emptyFiles(dirfd int, dev uint64) (string, error) {
	sub := ""
	err := forEachEntry(dirfd, func(d dirent) (bool, error) {
		isDir := d.typ == unix.DT_DIR
		if d.typ == unix.DT_UNKNOWN || isDir {
			var st unix.Stat_t
			if err := unix.Fstatat(dirfd, d.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					return true, nil
				}
				return false, err
			}
			isDir = st.Mode&unix.S_IFMT == unix.S_IFDIR
			if isDir && st.Dev != dev {
				return false, fmt.Errorf("%q is a mount point; refusing to remove across file systems", d.name)
			}
		}
		if isDir {
			sub = d.name
			return false, nil // descend before reading further
		}
		return true, unlink(dirfd, d.name, 0)
	})
	return sub, err
}

// removeByInode removes the (empty) subdirectory of dirfd whose inode is
// ino: the directory just emptied, whose name was not kept. The entries'
// own inode numbers are tried first; where a file system reports them
// differently from stat (overlayfs may), each directory is stat'ed.
func removeByInode(dirfd int, ino uint64) error {
	for _, byStat := range []bool{false, true} {
		if _, err := unix.Seek(dirfd, 0, 0); err != nil {
			return fmt.Errorf("rewind directory: %w", err)
		}
		found := ""
		err := forEachEntry(dirfd, func(d dirent) (bool, error) {
			match := d.ino == ino
			if byStat && (d.typ == unix.DT_DIR || d.typ == unix.DT_UNKNOWN) {
				var st unix.Stat_t
				match = unix.Fstatat(dirfd, d.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Ino == ino
			}
			if match {
				found = d.name
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		if found != "" {
			if _, err := unix.Seek(dirfd, 0, 0); err != nil {
				return fmt.Errorf("rewind directory: %w", err)
			}
			return unlink(dirfd, found, unix.AT_REMOVEDIR)
		}
	}
	return errors.New("an emptied directory vanished from its parent")
}
