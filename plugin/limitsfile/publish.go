package limitsfile

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// Step names one failure point of Publish; errors name the step that failed.
type Step string

// The steps of Publish, in order.
const (
	StepCleanup Step = "cleanup" // removing a previous crash's temp files
	StepCreate  Step = "create"
	StepWrite   Step = "write"
	StepSync    Step = "fsync"
	StepChmod   Step = "chmod"
	StepClose   Step = "close"
	StepRename  Step = "rename"
	StepDirSync Step = "dir-fsync"
)

// StepError is returned by Publish; it names the path and the step.
type StepError struct {
	Step Step
	Path string
	Err  error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("publish limits file: %s %s: %v", e.Step, e.Path, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// TempPattern returns the os.CreateTemp pattern for temporaries of the final
// file name base: ".<base>.tmp-*".
func TempPattern(base string) string { return "." + base + TempMarker + "*" }

// TempOwner reports whether name is a temporary created by Publish and, if
// so, the base name of the file it was meant to become.
func TempOwner(name string) (base string, ok bool) {
	if !strings.HasPrefix(name, ".") {
		return "", false
	}
	i := strings.LastIndex(name, TempMarker)
	if i <= 1 {
		return "", false
	}
	return name[1:i], true
}

// Publisher writes files atomically: readers see the old file, no file, or
// the complete new file, never a prefix of it.
type Publisher struct {
	FS FS
}

// Publish replaces path with data: remove temporaries a crashed earlier
// Publish of the same path left behind, write a temp file in the same
// directory, fsync, chmod 0644, rename over path, fsync the directory. On
// failure before the rename the temp file is removed; the returned error is
// a *StepError naming the step and the path it failed on.
//
// Two concurrent Publish calls for the same path are not supported (one may
// remove the other's temporary and fail); the plugin never does that.
func (p Publisher) Publish(path string, data []byte) error {
	fsys := p.FS
	if fsys == nil {
		fsys = OSFS{}
	}
	dir, base := filepath.Split(path)
	dir = filepath.Clean(dir)

	if err := removeStaleTemps(fsys, dir, base); err != nil {
		return &StepError{Step: StepCleanup, Path: dir, Err: err}
	}

	f, err := fsys.CreateTemp(dir, TempPattern(base))
	if err != nil {
		return &StepError{Step: StepCreate, Path: filepath.Join(dir, TempPattern(base)), Err: err}
	}
	tmp := f.Name()
	fail := func(step Step, path string, err error, closeFile bool) error {
		if closeFile {
			err = errors.Join(err, ignoreClosed(f.Close()))
		}
		if rerr := fsys.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("remove temp file: %w", rerr))
		}
		return &StepError{Step: step, Path: path, Err: err}
	}

	if _, err := f.Write(data); err != nil {
		return fail(StepWrite, tmp, err, true)
	}
	if err := f.Sync(); err != nil {
		return fail(StepSync, tmp, err, true)
	}
	if err := f.Chmod(FileMode); err != nil {
		return fail(StepChmod, tmp, err, true)
	}
	if err := f.Close(); err != nil {
		return fail(StepClose, tmp, err, false)
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return fail(StepRename, path, err, false)
	}
	// The file under its final name is complete from here on; a failed
	// directory fsync only means the rename may not survive a node crash,
	// but the caller must still treat the delivery as failed.
	if err := fsys.SyncDir(dir); err != nil {
		return &StepError{Step: StepDirSync, Path: dir, Err: err}
	}
	return nil
}

// RemoveFile removes path and any temporaries of it; a missing file is fine.
func (p Publisher) RemoveFile(path string) error {
	fsys := p.FS
	if fsys == nil {
		fsys = OSFS{}
	}
	dir, base := filepath.Split(path)
	if err := removeStaleTemps(fsys, filepath.Clean(dir), base); err != nil {
		return fmt.Errorf("remove temporaries of %s: %w", path, err)
	}
	if err := fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

func removeStaleTemps(fsys FS, dir, base string) error {
	names, err := fsys.ReadDirNames(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if owner, ok := TempOwner(n); ok && owner == base {
			if err := fsys.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

func ignoreClosed(err error) error {
	if errors.Is(err, fs.ErrClosed) {
		return nil
	}
	return err
}
