package identity

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

const (
	cid  = "4c6f9be64efa84ccc6541ce94f0a4cd6e1f47b4dd2a3c69e91c01aef28758854"
	node = "9f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
	uid  = "3b2e7a10-5c4d-4e6f-8a9b-0c1d2e3f4a5b"
)

func TestParseCgroup(t *testing.T) {
	for _, c := range []struct {
		name, data string
		pod        types.UID
		id         string
	}{
		{"v1 cgroupfs kubelet", "12:memory:/kubepods/besteffort/pod" + uid + "/" + cid + "\n1:name=systemd:/kubepods/besteffort/pod" + uid + "/" + cid + "\n", uid, cid},
		{"v2 systemd containerd", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod3b2e7a10_5c4d_4e6f_8a9b_0c1d2e3f4a5b.slice/cri-containerd-" + cid + ".scope\n", uid, cid},
		{"kind node in docker (v1)", "4:memory:/docker/" + node + "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod3b2e7a10_5c4d_4e6f_8a9b_0c1d2e3f4a5b.slice/cri-containerd-" + cid + ".scope\n", uid, cid},
		{"kind, cgroupfs under the node", "3:cpu:/docker/" + node + "/kubelet/kubepods/pod" + uid + "/" + cid + "\n", uid, cid},
		{"cgroup namespace relative", "0::/../../kubepods-besteffort-pod3b2e7a10_5c4d_4e6f_8a9b_0c1d2e3f4a5b.slice/cri-containerd-" + cid + ".scope\n", uid, cid},
		{"docker cgroupfs", "4:memory:/docker/" + cid + "\n0::/\n", "", cid},
		{"docker systemd", "0::/system.slice/docker-" + cid + ".scope\n", "", cid},
		{"cri-o, conmon is not the container", "0::/kubepods.slice/kubepods-pod3b2e7a10_5c4d_4e6f_8a9b_0c1d2e3f4a5b.slice/crio-conmon-" + cid + ".scope\n", uid, ""},
		{"pod sandbox level only", "0::/kubepods/pod" + uid + "\n", uid, ""},
		{"a child cgroup the container made", "0::/kubepods/pod" + uid + "/" + cid + "/mine/" + node + "\n", uid, cid},
		{"host process", "0::/user.slice/user-0.slice/session-1.scope\n4:memory:/process_api/810902e68537985f\n", "", ""},
		{"v2 wins over v1", "4:memory:/docker/" + node + "\n0::/kubepods/pod" + uid + "/" + cid + "\n", uid, cid},
		{"v1 line with a pod beats one without", "4:memory:/docker/" + node + "\n3:cpu:/kubepods/pod" + uid + "/" + cid + "\n", uid, cid},
		{"short and odd ids", "0::/docker/abc\n1:x:/pod123/" + cid[:63] + "\n", "", ""},
		{"garbage", "\x00\xff:::\n::\n", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod, id := ParseCgroup([]byte(c.data))
			if pod != c.pod || id != c.id {
				t.Errorf("ParseCgroup = (%q, %q), want (%q, %q)", pod, id, c.pod, c.id)
			}
		})
	}
}

func FuzzParseCgroup(f *testing.F) {
	f.Add([]byte("0::/kubepods/pod" + uid + "/" + cid + "\n"))
	f.Add([]byte("4:memory:/docker/" + node + "/kubelet.slice/kubelet-kubepods-besteffort-pod3b2e7a10_5c4d_4e6f_8a9b_0c1d2e3f4a5b.slice/cri-containerd-" + cid + ".scope\n"))
	f.Add([]byte("0::/system.slice/docker-" + cid + ".scope"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pod, id := ParseCgroup(data)
		if id != "" && len(id) != 64 {
			t.Fatalf("container ID %q is not 64 hex digits", id)
		}
		if pod != "" && !isUUID(string(pod)) {
			t.Fatalf("pod UID %q is not a UUID", pod)
		}
	})
}

func TestReadProcessSelf(t *testing.T) {
	p, err := ReadProcess("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != os.Getpid() || p.NSPID == 0 || p.StartTime == 0 {
		t.Errorf("ReadProcess(self) = %+v: want PID, NSPID and start time", p)
	}
	if _, err := ReadProcess("/proc", 1<<30); err == nil {
		t.Error("ReadProcess of a PID that does not exist succeeded")
	}
}

// A process chooses its command name: parentheses and spaces in it must not
// shift the fields after it; the innermost NSpid is the container's.
func TestReadProcessFake(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "4242")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fields := ""
	for i := 3; i <= 21; i++ {
		fields += " " + strconv.Itoa(i)
	}
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("stat", "4242 (evil) 1 2 3 (x)"+fields+" 987654 23 24\n")
	write("cgroup", "0::/kubepods/pod"+uid+"/"+cid+"\n")
	write("status", "Name:\tevil\nNSpid:\t4242\t17\t7\nPPid:\t1\n")
	p, err := ReadProcess(root, 4242)
	if err != nil {
		t.Fatal(err)
	}
	want := Process{PID: 4242, NSPID: 7, StartTime: 987654, PodUID: uid, ContainerID: cid}
	if p != want {
		t.Errorf("ReadProcess = %+v, want %+v", p, want)
	}
	write("cgroup", string(make([]byte, maxProcFile+1)))
	if _, err := ReadProcess(root, 4242); err == nil {
		t.Error("a cgroup file over the bound was read")
	}
}

func TestDeviceUUID(t *testing.T) {
	const gpu = "GPU-0fc3d2a1-1111-2222-3333-123456789012"
	const mig = "MIG-9e0d3b2c-aaaa-bbbb-cccc-ddddeeeeffff"
	known := map[string]bool{gpu: true, mig: true}
	for _, c := range []struct {
		id    string
		known map[string]bool
		want  string
		ok    bool
	}{
		{DeviceID(gpu, 3), known, gpu, true},
		{DeviceID(gpu, 3), nil, gpu, true},
		{mig, known, mig, true},
		{mig, nil, mig, true},
		{gpu, known, "", false}, // a bare GPU UUID is never advertised
		{DeviceID("GPU-other", 0), known, "", false},
		{DeviceID("GPU-other", 0), nil, "GPU-other", true},
		{"GPU-x-", nil, "", false},
		{"nodash", nil, "", false},
		{"GPU-x-1a", nil, "", false},
	} {
		got, ok := DeviceUUID(c.id, c.known)
		if got != c.want || ok != c.ok {
			t.Errorf("DeviceUUID(%q, known=%v) = %q, %v; want %q, %v", c.id, c.known != nil, got, ok, c.want, c.ok)
		}
	}
}
