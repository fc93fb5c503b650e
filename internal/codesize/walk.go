package codesize

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// cDirs are where production C lives: the two libraries, the ABI headers, and C beside Go code.
var cDirs = []string{"hamicore/src/", "hamicore/include/", "fakegpu/src/", "abi/", "plugin/", "harness/"}

// skipDirs are never production: build output, fixtures, version control, vendored modules.
var skipDirs = map[string]bool{".git": true, "build": true, "build-san": true, "testdata": true, "node_modules": true, "vendor": true}

// Production reports whether the file at path (slash-separated, relative to the root) is held to
// the limits: Go outside tests, and C/H in the production directories.
func Production(path string) bool {
	switch {
	case strings.HasSuffix(path, "_test.go"):
		return false
	case strings.HasSuffix(path, ".go"):
		return true
	case strings.HasSuffix(path, ".c"), strings.HasSuffix(path, ".h"):
		for _, d := range cDirs {
			if strings.HasPrefix(path, d) {
				return true
			}
		}
	}
	return false
}

// generated is Go's marker for a generated file, which is held to its generator, not to these limits.
var generated = []byte("\n// Code generated ")

// Walk checks every production file under root and returns every offender, in path order.
func Walk(root string) ([]Offender, error) {
	var out []Offender
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if p != root && (skipDirs[d.Name()] || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !Production(rel) {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.HasPrefix(src, generated[1:]) || bytes.Contains(src, generated) {
			return nil
		}
		o, err := Check(rel, src)
		out = append(out, o...)
		return err
	})
	return out, err
}
