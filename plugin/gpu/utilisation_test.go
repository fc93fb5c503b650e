package gpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/plugin/gpu/fakenvml"
)

type utilReply struct {
	samples []nvml.ProcessUtilizationSample
	ret     nvml.Return
}

// mockUtil is one GPU whose process utilisation answers replies in turn, recording the
// lastSeenTimeStamp of each call.
func mockUtil(uuid string, replies *[]utilReply, seen *[]uint64) *mock.Device {
	return &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetProcessUtilizationFunc: func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			*seen = append(*seen, last)
			if len(*replies) == 0 {
				return nil, nvml.ERROR_NOT_FOUND
			}
			r := (*replies)[0]
			*replies = (*replies)[1:]
			return r.samples, r.ret
		},
	}
}

// The samples since the last read, averaged per process; each read asks for those newer than the
// newest it saw; a list that grew under the read is read again; figures beyond 100 % and samples
// not newer than asked are dropped; a GPU without per-process samples (MIG) is not listed; a GPU
// that fails carries its error.
func TestBusySampler(t *testing.T) {
	a := []utilReply{
		{[]nvml.ProcessUtilizationSample{{Pid: 10, TimeStamp: 100, SmUtil: 40}, {Pid: 10, TimeStamp: 200, SmUtil: 60},
			{Pid: 11, TimeStamp: 150, SmUtil: 150}, {Pid: 12, TimeStamp: 180, SmUtil: 20}}, nvml.SUCCESS},
		{nil, nvml.ERROR_INSUFFICIENT_SIZE},
		{[]nvml.ProcessUtilizationSample{{Pid: 12, TimeStamp: 200, SmUtil: 90}, {Pid: 12, TimeStamp: 300, SmUtil: 70}}, nvml.SUCCESS},
	}
	b := []utilReply{{nil, nvml.ERROR_NOT_SUPPORTED}, {nil, nvml.ERROR_NOT_SUPPORTED}}
	c := []utilReply{{nil, nvml.ERROR_GPU_IS_LOST}, {nil, nvml.ERROR_NOT_FOUND}}
	var seenA, seenB, seenC []uint64
	devs := []nvml.Device{mockUtil("GPU-a", &a, &seenA), mockUtil("GPU-b", &b, &seenB), mockUtil("GPU-c", &c, &seenC)}
	lib := &mock.Interface{
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) { return devs[i], nvml.SUCCESS },
	}
	s := &BusySampler{Lib: lib}
	first, err := s.Busy()
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 2 || first[0].UUID != "GPU-a" || first[1].UUID != "GPU-c" || first[1].Err == nil {
		t.Fatalf("first read: %+v, want GPU-a and GPU-c's error (GPU-b unsupported)", first)
	}
	if got := first[0].Processes; len(got) != 2 || got[0] != (ProcessBusy{PID: 10, Share: 0.5, Samples: 2}) ||
		got[1] != (ProcessBusy{PID: 12, Share: 0.2, Samples: 1}) {
		t.Errorf("first read of GPU-a: %+v, want pid 10 at 0.5 (2 samples), 12 at 0.2; 11's 150 %% dropped", got)
	}
	second, err := s.Busy()
	if err != nil {
		t.Fatal(err)
	}
	if got := second[0].Processes; len(got) != 1 || got[0] != (ProcessBusy{PID: 12, Share: 0.7, Samples: 1}) {
		t.Errorf("second read of GPU-a: %+v, want pid 12 at 0.7 (the sample at 200 is not newer than 200)", got)
	}
	if len(second[1].Processes) != 0 || second[1].Err != nil {
		t.Errorf("second read of GPU-c: %+v, want nobody busy", second[1])
	}
	if len(seenA) != 3 || seenA[0] != 0 || seenA[1] != 200 || seenA[2] != 200 {
		t.Errorf("GPU-a asked since %v, want 0, then 200 twice (the retry)", seenA)
	}
}

// Through fakegpu's real NVML: a process that keeps the GPU busy is sampled busy, by its PID; one
// that only holds memory is not.
func TestBusySamplerFakegpu(t *testing.T) {
	lib, _ := fakenvml.Setup(t, "2x-a16-16q")
	p := cbuild.Build(t)
	busy := exec.Command(filepath.Join(p.Bin, "hamicore-launchprobe"), "--seconds", "4", "--kernel-us", "1000")
	busy.Env = append(os.Environ(), "LD_LIBRARY_PATH="+p.Lib, "CUDA_VISIBLE_DEVICES=1")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Process.Kill(); _ = busy.Wait() }()
	l := &ProcessLister{Lib: lib}
	if err := l.Init(); err != nil {
		t.Fatal(err)
	}
	defer l.Shutdown()
	s := &BusySampler{Lib: lib}
	time.Sleep(1500 * time.Millisecond)
	devs, err := s.Busy()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]ProcessBusy{}
	for _, d := range devs {
		if d.Err != nil {
			t.Errorf("%s: %v", d.UUID, d.Err)
		}
		got[d.UUID] = d.Processes
	}
	if ps := got[a16UUID1]; len(ps) != 1 || ps[0].PID != busy.Process.Pid || ps[0].Share < 0.8 {
		t.Errorf("GPU 1: %+v, want pid %d busy at least 0.8", ps, busy.Process.Pid)
	}
	if ps := got[a16UUID0]; len(ps) != 0 {
		t.Errorf("GPU 0: %+v, want nobody", ps)
	}
}
