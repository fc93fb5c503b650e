package monitor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/internal/tier"
	"github.com/limitbed/limitbed/plugin/identity"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/region"
)

// Issue 20's second finding: root in a container may mknod a device node in
// its cache directory (a default Docker container keeps CAP_MKNOD), and the
// compute-policy pass opened usage.cache read-write every second, running the
// device's driver. Now it goes through safefile: nothing but a regular file of
// a region's size is ever opened. inotify sees every open of the node's inode
// (an O_PATH descriptor, safefile's check, opens nothing and reports nothing).
func TestFeedbackNeverOpensTenantNodes(t *testing.T) {
	tier.Require(t, tier.Root.For("mknod of a character device, as root in a container may"))
	dir := t.TempDir()
	ids := staticIdentity{}
	for _, n := range []string{"pdev", "pfifo", "plink", "pgood"} {
		ids.cs = append(ids.cs, known(n, 1, "GPU-0"))
		if err := os.MkdirAll(filepath.Join(dir, n+"_main"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dev := filepath.Join(dir, "pdev_main", paths.UsageCacheName)
	if err := unix.Mknod(dev, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil { // /dev/null's numbers
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "pfifo_main", paths.UsageCacheName)
	if err := unix.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	// A host file of a region's size behind a symlink: never followed, never written.
	host := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(host, region.LimitbedSpec{Priority: 1, Recent: 1}.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(dir, "plink_main", paths.UsageCacheName)); err != nil {
		t.Fatal(err)
	}
	good := computeRegion(t, dir, "pgood_main", 1, 1, regionGPU(0))

	ino, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ino)
	for _, p := range []string{dev, fifo, host} {
		if _, err := unix.InotifyAddWatch(ino, p, unix.IN_OPEN|unix.IN_MODIFY); err != nil {
			t.Fatal(err)
		}
	}
	f := &Feedback{Dir: dir, Identity: ids, Logger: klog.Background()}
	done := make(chan PassResult, 1)
	go func() {
		res, err := f.Pass(context.Background())
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	var res PassResult
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the pass blocked on a tenant's file")
	}
	buf := make([]byte, 4096)
	if n, _ := unix.Read(ino, buf); n > 0 {
		t.Errorf("the pass opened or wrote a tenant's device node, FIFO or linked host file (%d bytes of inotify events)", n)
	}
	if _, ok := res.Switch["pgood_main"]; !ok || len(res.Switch) != 1 {
		t.Errorf("switches %v: want the good region decided and the three others skipped", res.Switch)
	}
	if computeOf(t, good).RecentKernel != 0 {
		t.Error("the good region's recent_kernel was not taken")
	}
}

// The decision's inputs other than activity come from the node's records: a
// tenant whose region claims no GPU and priority -5 is, for its neighbours,
// what its limits file and the kubelet say (GPU-A, priority 1). A container
// the identity does not know is throttled; with no identity at all, every
// container is (fail closed).
func TestFeedbackTakesGPUsAndPriorityFromIdentity(t *testing.T) {
	dir := t.TempDir()
	computeRegion(t, dir, "victim_main", 1, 1, regionGPU(0xB))   // alone on GPU-B, busy
	computeRegion(t, dir, "tenant_main", -5, 1)                  // GPUs zeroed, priority forged, busy
	computeRegion(t, dir, "high_main", 0, 1, regionGPU(0xA))     // GPU-A, priority 0, busy
	computeRegion(t, dir, "stranger_main", 1, 0, regionGPU(0xC)) // not in the identity, idle
	ids := staticIdentity{cs: []*identity.Container{known("victim", 1, "GPU-B"), known("tenant", 1, "GPU-A"), known("high", 0, "GPU-A")}}
	f := &Feedback{Dir: dir, Identity: ids, Logger: klog.Background()}
	res, err := f.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint32{"victim_main": 0, "high_main": 0, "tenant_main": 1, "stranger_main": 1}
	for k, v := range want {
		if res.Switch[k] != v {
			t.Errorf("switch of %s = %d, want %d (all %v)", k, res.Switch[k], v, res.Switch)
		}
	}
	f.Identity = staticIdentity{err: errors.New("API server unreachable")}
	if res, _ = f.Pass(context.Background()); res.Switch["victim_main"] != 1 || res.Switch["high_main"] != 1 {
		t.Errorf("without an identity: %v, want every container throttled", res.Switch)
	}
	f.Identity = nil
	if _, err := f.Pass(context.Background()); err == nil {
		t.Error("a pass without an identity source")
	}
}
