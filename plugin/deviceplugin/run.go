package deviceplugin

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// retryInterval is how long Run waits before retrying a failed start.
const retryInterval = 5 * time.Second

// Run serves until ctx ends. It restarts the plugin (fresh socket, new
// registration) whenever kubelet.sock is re-created, which is how a kubelet
// restart shows, and retries a failed start.
func Run(ctx context.Context, opts Options) error {
	p, err := New(opts)
	if err != nil {
		return err
	}
	log := p.log
	var events <-chan fsnotify.Event
	var errs <-chan error
	if opts.KubeletSocket != "" {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			return fmt.Errorf("watch kubelet socket: %w", err)
		}
		defer w.Close()
		if err := w.Add(filepath.Dir(opts.KubeletSocket)); err != nil {
			return fmt.Errorf("watch %s: %w", filepath.Dir(opts.KubeletSocket), err)
		}
		events, errs = w.Events, w.Errors
	}

	retry := time.NewTimer(0) // first start immediately
	defer retry.Stop()
	running := false
	restart := func(reason string) {
		if running {
			log.Info("Restarting plugin", "reason", reason)
			p.Stop()
			running = false
		}
		if err := p.Start(ctx); err != nil {
			log.Error(err, "Plugin start failed; retrying", "in", retryInterval)
			retry.Reset(retryInterval)
			return
		}
		running = true
	}
	for {
		select {
		case <-ctx.Done():
			p.Stop()
			return nil
		case <-retry.C:
			if !running {
				restart("start")
			}
		case ev := <-events:
			if ev.Name == opts.KubeletSocket && ev.Has(fsnotify.Create) {
				restart("kubelet socket re-created")
			}
		case err := <-errs:
			log.Error(err, "Watching the kubelet socket")
		}
	}
}
