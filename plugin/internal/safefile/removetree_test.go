package safefile

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// chain makes depth nested directories "d" under dir, each with a file, by
// descriptors (the path outgrows PATH_MAX), holding two at a time.
func chain(t testing.TB, dir string, depth int) {
	t.Helper()
	cur, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < depth; i++ {
		if err := unix.Mkdirat(cur, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := unix.Openat(cur, "f", unix.O_CREAT|unix.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(f)
		next, err := unix.Openat(cur, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(cur)
		cur = next
	}
	unix.Close(cur)
}

// A chain deeper than the file descriptor limit and longer than PATH_MAX is
// removed with the limit at 16 descriptors. It runs in a child process,
// whose limit can be lowered without touching the test binary's.
func TestRemoveTreeDeeperThanTheFDLimit(t *testing.T) {
	if os.Getenv("SAFEFILE_DEEP_CHILD") != "" {
		depth, _ := strconv.Atoi(os.Getenv("SAFEFILE_DEEP_CHILD"))
		dir := os.Getenv("SAFEFILE_DEEP_DIR")
		chain(t, dir, depth)
		var lim unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		lim.Cur = 16
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		if err := RemoveTree(filepath.Join(dir, "d")); err != nil {
			t.Fatal(err)
		}
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRemoveTreeDeeperThanTheFDLimit$")
	cmd.Env = append(os.Environ(), "SAFEFILE_DEEP_CHILD=2500", "SAFEFILE_DEEP_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if _, err := os.Lstat(filepath.Join(dir, "d")); !os.IsNotExist(err) {
		t.Fatalf("the chain is still there (%v)", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "f")); err != nil {
		t.Fatalf("the file beside the tree was removed: %v", err)
	}
}

// Links are unlinked, never followed; FIFOs and sockets are unlinked
// without being opened; wide directories and subtrees go.
func TestRemoveTreeNeverFollowsALink(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(root, "host")
	if err := os.MkdirAll(filepath.Join(outside, "keep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(root, "uid_main")
	for i := range 50 {
		sub := filepath.Join(tree, fmt.Sprintf("s%d", i), "inner")
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		for j := range 20 {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d", j)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, target := range map[string]string{"to-dir": outside, "to-file": filepath.Join(outside, "secret"), "dotdot": "../host", "dangling": "/nonexistent"} {
		if err := os.Symlink(target, filepath.Join(tree, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(tree, "usage.cache"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := RemoveTree(tree); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(tree); !os.IsNotExist(err) {
		t.Fatalf("tree still there: %v", err)
	}
	for _, p := range []string{filepath.Join(outside, "keep"), filepath.Join(outside, "secret")} {
		if _, err := os.Lstat(p); err != nil {
			t.Fatalf("a link's target was removed: %v", err)
		}
	}
	if err := RemoveTree(tree); err != nil {
		t.Fatalf("an absent tree: %v", err)
	}
	file := filepath.Join(root, "plain")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RemoveTree(file); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(file); !os.IsNotExist(err) {
		t.Fatal("a plain file was not removed")
	}
}
