// Command regiondump prints a usage.cache, limitbed's layout or upstream
// HAMi-core's, as one JSON object: the layout, the devices (limit, usage,
// usage of live processes, compute limit) and every occupied slot (pid, host
// pid, liveness, usage per device, and HAMi-core's context/module/data parts).
// It only reads: the file is opened read-only, and liveness of a limitbed slot
// is asked of the kernel (F_OFD_GETLK on the slot's lock byte), never taken.
//
//	regiondump PATH
//
// Exit status: 0 printed, 1 the file could not be read or is no understood
// region (the message says what was found and which layouts are understood),
// 2 usage.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/limitbed/limitbed/plugin/region"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// dump is the printed document: the decoded region and where it came from.
type dump struct {
	Path string `json:"path"`
	region.Region
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || args[0] == "" || args[0][0] == '-' {
		fmt.Fprintln(stderr, "usage: regiondump PATH")
		return 2
	}
	r, err := read(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "regiondump: %v\n", err)
		return 1
	}
	if err := json.NewEncoder(stdout).Encode(dump{Path: args[0], Region: r}); err != nil {
		fmt.Fprintf(stderr, "regiondump: %v\n", err)
		return 1
	}
	return 0
}

// read opens path as a container-writable file must be opened: no symlink
// followed, no blocking on a FIFO, a regular file only, bounded read.
func read(path string) (region.Region, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return region.Region{}, fmt.Errorf("open %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return region.Region{}, fmt.Errorf("stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return region.Region{}, fmt.Errorf("%s: not a regular file (%v)", path, st.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, region.MaxFileSize+1))
	if err != nil {
		return region.Region{}, fmt.Errorf("read %s: %w", path, err)
	}
	r, err := region.Decode(b, region.Options{SlotLocked: func(slot int) (bool, error) { return locked(f, slot) }})
	if err != nil {
		return region.Region{}, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// locked reports whether some process holds the lock byte of slot. An open
// file description query sees the locks libvgpu takes (open file description
// locks; POSIX ones in older builds) and takes none itself.
func locked(f *os.File, slot int) (bool, error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: region.LockByte(slot), Len: 1}
	for {
		err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("F_OFD_GETLK on byte %d: %w", lk.Start, err)
		}
		return lk.Type != unix.F_UNLCK, nil
	}
}
