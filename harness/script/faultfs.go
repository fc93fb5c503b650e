package script

import (
	"fmt"
	"io/fs"
	"slices"

	"github.com/limitbed/limitbed/plugin/limitsfile"
)

// faultFS is the limits file writer's filesystem with one step failing, like a full disk (write),
// a failing device (fsync) or a read-only remount (rename) on a real node.
type faultFS struct {
	limitsfile.OSFS
	step limitsfile.Step
}

var faultSteps = []limitsfile.Step{limitsfile.StepCreate, limitsfile.StepWrite, limitsfile.StepSync,
	limitsfile.StepChmod, limitsfile.StepClose, limitsfile.StepRename, limitsfile.StepDirSync}

func newFaultFS(step string) (*faultFS, error) {
	if !slices.Contains(faultSteps, limitsfile.Step(step)) {
		return nil, fmt.Errorf("unknown publish step %q (one of %v)", step, faultSteps)
	}
	return &faultFS{step: limitsfile.Step(step)}, nil
}

func (f *faultFS) fail(s limitsfile.Step) error {
	if f.step == s {
		return fmt.Errorf("injected %s failure: %w", s, fs.ErrPermission)
	}
	return nil
}

func (f *faultFS) CreateTemp(dir, pattern string) (limitsfile.File, error) {
	if err := f.fail(limitsfile.StepCreate); err != nil {
		return nil, err
	}
	file, err := f.OSFS.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f}, nil
}

func (f *faultFS) Rename(oldpath, newpath string) error {
	if err := f.fail(limitsfile.StepRename); err != nil {
		return err
	}
	return f.OSFS.Rename(oldpath, newpath)
}

func (f *faultFS) SyncDir(dir string) error {
	if err := f.fail(limitsfile.StepDirSync); err != nil {
		return err
	}
	return f.OSFS.SyncDir(dir)
}

type faultFile struct {
	limitsfile.File
	fs *faultFS
}

func (f *faultFile) Write(p []byte) (int, error) {
	if err := f.fs.fail(limitsfile.StepWrite); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *faultFile) Sync() error {
	if err := f.fs.fail(limitsfile.StepSync); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultFile) Chmod(m fs.FileMode) error {
	if err := f.fs.fail(limitsfile.StepChmod); err != nil {
		return err
	}
	return f.File.Chmod(m)
}

func (f *faultFile) Close() error {
	if err := f.fs.fail(limitsfile.StepClose); err != nil {
		_ = f.File.Close()
		return err
	}
	return f.File.Close()
}
