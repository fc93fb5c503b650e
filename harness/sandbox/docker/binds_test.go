package docker

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/limitbed/limitbed/harness/sandbox"
)

func TestDockerBinds(t *testing.T) {
	t.Parallel()
	got, err := dockerBinds([]sandbox.Mount{{HostPath: "/a", ContainerPath: "/b", ReadOnly: true}, {HostPath: "/c", ContainerPath: "/d"}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/a:/b:ro", "/c:/d:rw"}, got); diff != "" {
		t.Errorf("binds (-want +got):\n%s", diff)
	}
	if _, err := dockerBinds([]sandbox.Mount{{HostPath: "/a:b", ContainerPath: "/b"}}); err == nil {
		t.Error("a ':' in a host path was accepted")
	}
}
