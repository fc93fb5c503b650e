package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/harness/nodeimage"
	"github.com/limitbed/limitbed/harness/nodeimage/nodeimagetest"
)

func TestRun(t *testing.T) {
	root, _ := nodeimagetest.Checkout(t, "limitbed/kind-node:v1.37.2-0123456789ab")
	cases := []struct {
		mode     string
		args     []string
		code     int
		stdout   string
		inStderr string
	}{
		{"stock", []string{root}, 0, "use " + nodeimage.Stock + "\n", ""},
		{"offline", []string{root}, 0, "offline limitbed/kind-node:v1.37.2-0123456789ab\n", ""},
		{"example.org/node:v1", nil, 0, "use example.org/node:v1\n", ""},
		{"offline", []string{t.TempDir()}, 1, "", "node-image.sh --print"},
		{"stock", []string{"a", "b"}, 2, "", "usage:"},
	}
	for _, tc := range cases {
		t.Setenv(nodeimage.Env, tc.mode)
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != tc.code || stdout.String() != tc.stdout || !strings.Contains(stderr.String(), tc.inStderr) {
			t.Errorf("%s=%s %v: exit %d, stdout %q, stderr %q; want %d, %q, stderr with %q",
				nodeimage.Env, tc.mode, tc.args, code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.inStderr)
		}
	}
}
