// Package nodeimagetest gives tests a checkout whose scripts/node-image.sh names an image and
// refuses to build it, recording how it was called.
package nodeimagetest

import (
	"os"
	"path/filepath"
	"testing"
)

// Checkout returns a directory holding scripts/node-image.sh that prints ref for --print and fails
// for anything else (a build), and the file where it appends the arguments of every call, one line
// each.
func Checkout(tb testing.TB, ref string) (root, calls string) {
	tb.Helper()
	root = tb.TempDir()
	calls = filepath.Join(root, "calls")
	script := "#!/bin/sh\necho \"$*\" >>'" + calls + "'\n" +
		"[ \"$1\" = --print ] || { echo 'node-image.sh: asked to build' >&2; exit 1; }\n" +
		"echo " + ref + "\n"
	if err := os.MkdirAll(filepath.Join(root, "scripts"), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "scripts", "node-image.sh"), []byte(script), 0o755); err != nil {
		tb.Fatal(err)
	}
	return root, calls
}
