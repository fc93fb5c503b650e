package gpu

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/plugin/gpu/fakenvml"
)

// TestProcessListerFakegpu lists what a cudaprobe holds on each device,
// through fakegpu's real libnvidia-ml.so.1: its PID (this namespace's) on
// the device it allocated on (a GPU, or a MIG device by its own UUID), with
// its allocation and context; nothing on the other devices.
func TestProcessListerFakegpu(t *testing.T) {
	for _, c := range []struct {
		profile, visible, uuid string
	}{
		{"2x-a16-16q", "1", a16UUID1},
		{"a100-mig", migUUID2g, migUUID2g},
	} {
		t.Run(c.profile, func(t *testing.T) {
			lib, _ := fakenvml.Setup(t, c.profile)
			p := cbuild.Build(t)
			cmd := exec.Command(filepath.Join(p.Bin, "cudaprobe"), "--mib", "500", "--hold-until-signal")
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+p.Lib, "CUDA_VISIBLE_DEVICES="+c.visible)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.Contains(line, `"granted_mib":500`) {
				t.Fatalf("holder: %q %v", line, err)
			}
			l := &ProcessLister{Lib: lib}
			if err := l.Init(); err != nil {
				t.Fatal(err)
			}
			defer l.Shutdown()
			devs, err := l.Processes()
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, d := range devs {
				if d.Err != nil {
					t.Errorf("%s: %v", d.UUID, d.Err)
				}
				for _, pr := range d.Processes {
					if pr.PID == cmd.Process.Pid {
						found = d.UUID == c.uuid && pr.UsedBytes >= 500<<20 && !pr.Unknown
						if !found {
							t.Errorf("the holder listed on %s with %+v; want %s with at least 500 MiB", d.UUID, pr, c.uuid)
						}
					}
				}
			}
			if !found {
				t.Errorf("the holder (pid %d) is not listed: %+v", cmd.Process.Pid, devs)
			}
		})
	}
}
