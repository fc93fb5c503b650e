package limitsfile

import (
	"errors"
	"io/fs"
	"syscall"
)

// faultFS wraps OSFS and calls hook before each step; a non-nil error from
// the hook fails that step. For StepWrite it writes half the data first, so a
// failed write leaves a torn temp file, the case the rename protects against.
type faultFS struct {
	OSFS
	hook func(Step) error
}

type faultFile struct {
	File
	hook func(Step) error
}

func (f faultFS) CreateTemp(dir, pattern string) (File, error) {
	if err := f.hook(StepCreate); err != nil {
		return nil, err
	}
	file, err := f.OSFS.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return faultFile{File: file, hook: f.hook}, nil
}

func (f faultFS) Rename(o, n string) error {
	if err := f.hook(StepRename); err != nil {
		return err
	}
	return f.OSFS.Rename(o, n)
}

func (f faultFS) SyncDir(dir string) error {
	if err := f.hook(StepDirSync); err != nil {
		return err
	}
	return f.OSFS.SyncDir(dir)
}

func (f faultFile) Write(p []byte) (int, error) {
	if err := f.hook(StepWrite); err != nil {
		n, _ := f.File.Write(p[:len(p)/2])
		return n, err
	}
	return f.File.Write(p)
}

func (f faultFile) Sync() error {
	if err := f.hook(StepSync); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f faultFile) Chmod(m fs.FileMode) error {
	if err := f.hook(StepChmod); err != nil {
		return err
	}
	return f.File.Chmod(m)
}

func (f faultFile) Close() error {
	if err := f.hook(StepClose); err != nil {
		_ = f.File.Close()
		return err
	}
	return f.File.Close()
}

var errInjected = errors.New("injected failure")

// failAt returns a hook that fails exactly the given step.
func failAt(step Step) func(Step) error {
	return func(s Step) error {
		if s == step {
			return errInjected
		}
		return nil
	}
}

// killAt returns a hook that SIGKILLs the current process at the given step,
// before the step runs: no deferred cleanup, no error path, like a node
// losing the plugin process mid-write.
func killAt(step Step) func(Step) error {
	return func(s Step) error {
		if s == step {
			_ = syscall.Kill(syscall.Getpid(), syscall.SIGKILL)
			select {} // never reached
		}
		return nil
	}
}
