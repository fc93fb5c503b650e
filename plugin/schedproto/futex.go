package schedproto

import (
	"errors"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Shared (not private) futex operations: the words live in file mappings that other processes,
// in other mount namespaces, map too; the kernel keys them by inode and offset.
const (
	futexWait = 0
	futexWake = 1
)

// futexWaitOn sleeps while *addr == val, at most d; a spurious or early return is fine (callers
// re-read). EFAULT (the page is gone: a truncated file) is returned as an error.
func futexWaitOn(addr *uint32, val uint32, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	ts := unix.NsecToTimespec(d.Nanoseconds())
	_, _, e := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
	switch {
	case e == 0, errors.Is(e, unix.EAGAIN), errors.Is(e, unix.ETIMEDOUT), errors.Is(e, unix.EINTR):
		return nil
	}
	return e
}

// futexWakeAll wakes every waiter on addr.
func futexWakeAll(addr *uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake, uintptr(1<<30), 0, 0, 0)
}
