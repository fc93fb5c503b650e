package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestOpenRejects(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(dir, "host-secret")
	if err := os.WriteFile(host, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(host, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	sparse := filepath.Join(dir, "sparse")
	if err := os.WriteFile(sparse, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(sparse, 1<<40); err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path string
		want Reason // "" = accepted
	}{
		{regular, ""},
		{link, ReasonSymlink},
		{fifo, ReasonNotRegular},
		{dir, ReasonNotRegular},
		{"/dev/null", ReasonNotRegular},
		{sparse, ReasonSize},
		{small, ReasonSize},
		{filepath.Join(dir, "absent"), ReasonMissing},
	}
	for _, tc := range cases {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				b, err := ReadFile(tc.path, Exactly(4096))
				if err == nil && len(b) != 4096 {
					err = errors.New("short read")
				}
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("ReadFile(%s) blocked", tc.path)
			}
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ReadFile(%s) = %v, want accepted", tc.path, err)
				}
				return
			}
			if err == nil || ReasonOf(err) != tc.want {
				t.Fatalf("ReadFile(%s) = %v (reason %s), want reason %s", tc.path, err, ReasonOf(err), tc.want)
			}
			if !errors.As(err, new(*Error)) || err.Error() == "" {
				t.Fatalf("error %v is not an *Error naming the path", err)
			}
		})
	}
}

func TestOneOf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	for _, n := range []int{100, 150, 200} {
		if err := os.WriteFile(path, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadFile(path, OneOf(200, 100))
		if ok := n != 150; (err == nil) != ok {
			t.Errorf("size %d: err %v, want accepted=%v", n, err, ok)
		}
	}
}

// A file that grows after Open is read only up to the bound.
func TestReadAllBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _, err := Open(path, Size{Min: 1, Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAll(f, Size{Min: 1, Max: 100}); ReasonOf(err) != ReasonSize {
		t.Fatalf("ReadAll after growth = %v, want a size error", err)
	}
}
