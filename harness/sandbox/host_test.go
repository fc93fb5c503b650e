package sandbox

import (
	"errors"
	"strings"
	"testing"
)

func TestHostContainerPath(t *testing.T) {
	t.Parallel()
	c := &hostContainer{root: "/state/root"}
	cases := []struct {
		in, want    string
		unsupported bool
		fails       bool
	}{
		{in: "/overrideEnv", want: "/state/root/overrideEnv"},
		{in: "/etc/ld.so.preload", want: "/state/root/etc/ld.so.preload"},
		{in: "/usr/local/vgpu/../vgpu/", want: "/state/root/usr/local/vgpu"},
		{in: "/tmpfoo", want: "/state/root/tmpfoo"},
		{in: "/tmp/vgpulock", want: "/state/root/tmp/vgpulock"}, // the container's own tmpfs
		{in: "/dev/nvidia0", unsupported: true},
		{in: "/run/fakegpu", want: "/state/root/run/fakegpu"},
		{in: "/sys/x", unsupported: true},
		{in: "/", unsupported: true},
		{in: "relative", fails: true},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := c.containerPath(tc.in)
			switch {
			case tc.unsupported:
				if !errors.Is(err, ErrUnsupported) {
					t.Errorf("containerPath(%q) = %q, %v; want ErrUnsupported", tc.in, got, err)
				}
			case tc.fails:
				if err == nil {
					t.Errorf("containerPath(%q) = %q; want an error", tc.in, got)
				}
			case err != nil || got != tc.want:
				t.Errorf("containerPath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestMountOrder(t *testing.T) {
	t.Parallel()
	in := []Mount{
		{ContainerPath: "/usr/local/vgpu/libvgpu.so"},
		{ContainerPath: "/etc/ld.so.preload"},
		{ContainerPath: "/usr/local/vgpu"},
		{ContainerPath: "/overrideEnv"},
	}
	var got []string
	for _, m := range mountOrder(in) {
		got = append(got, m.ContainerPath)
	}
	want := []string{"/overrideEnv", "/etc/ld.so.preload", "/usr/local/vgpu", "/usr/local/vgpu/libvgpu.so"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("mountOrder = %v, want %v (parents first, stable)", got, want)
	}
	if in[0].ContainerPath != "/usr/local/vgpu/libvgpu.so" {
		t.Fatal("mountOrder changed its input")
	}
}
