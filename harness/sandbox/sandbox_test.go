package sandbox

import (
	"errors"
	"testing"
)

func TestUnavailableError(t *testing.T) {
	t.Parallel()
	err := Unavailable("docker", "no engine answers: %s", "dial unix")
	if !errors.Is(err, ErrUnavailable) || err.Error() != "docker: no engine answers: dial unix" {
		t.Errorf("Unavailable() = %q (Is ErrUnavailable: %v)", err, errors.Is(err, ErrUnavailable))
	}
}
