package sandbox

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDockerBinds(t *testing.T) {
	t.Parallel()
	got, err := dockerBinds([]Mount{{HostPath: "/a", ContainerPath: "/b", ReadOnly: true}, {HostPath: "/c", ContainerPath: "/d"}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/a:/b:ro", "/c:/d:rw"}, got); diff != "" {
		t.Errorf("binds (-want +got):\n%s", diff)
	}
	if _, err := dockerBinds([]Mount{{HostPath: "/a:b", ContainerPath: "/b"}}); err == nil {
		t.Error("a ':' in a host path was accepted")
	}
}
