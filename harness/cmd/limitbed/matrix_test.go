package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMatrixPluginOldFlags: bad --plugin-old / --plugin-old-args / --core-link are usage errors (exit 2) naming
// the problem, caught before any backend or build is touched.
func TestMatrixPluginOldFlags(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "plugin.txt")
	exe := filepath.Join(dir, "plugin")
	for p, mode := range map[string]os.FileMode{notExec: 0o644, exe: 0o755} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		args    []string
		mention string
	}{
		{"missing binary", []string{"--plugin-old=" + filepath.Join(dir, "none")}, "no such file"},
		{"not executable", []string{"--plugin-old=" + notExec}, "not an executable file"},
		{"args without binary", []string{"--plugin-old-args=--x"}, "--plugin-old-args needs --plugin-old"},
		{"host backend", []string{"--backend=host"}, "host backend is not offered"},
		{"unknown core link", []string{"--core-link=static"}, `core link "static": want as-needed or no-as-needed`},
		{"unknown placeholder", []string{"--plugin-old=" + exe, "--plugin-old-args=--kubeconfig={kubeconfig} --n={nodename}"},
			"unknown placeholder {nodename}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), append([]string{"matrix"}, tc.args...), &out, &errb)
			if code != 2 || !strings.Contains(errb.String(), tc.mention) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errb.String(), tc.mention)
			}
		})
	}
}
