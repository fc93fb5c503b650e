package limitsfile

import (
	"bufio"
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite limits and parsed.env of testdata/limits/valid from input.env")

const vectorsDir = "../../testdata/limits"

// readEnv reads KEY=VALUE lines (split at the first '=') into a map.
func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			t.Fatalf("%s: line %q has no '='", path, sc.Text())
		}
		out[k] = v
	}
	return out
}

func caseDirs(t *testing.T, kind string) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(vectorsDir, kind, "*"))
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// TestValidVectors proves the writer produces exactly the bytes of every
// valid vector and the parser derives exactly its parsed.env, with no line
// skipped. The C reader runs over the same files.
func TestValidVectors(t *testing.T) {
	dirs := caseDirs(t, "valid")
	if len(dirs) < 5 {
		t.Fatalf("expected at least 5 valid vectors, found %d", len(dirs))
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			got, err := Render(readEnv(t, filepath.Join(dir, "input.env")))
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			parsed := Parse(got)
			if *update {
				writeFile(t, filepath.Join(dir, "limits"), got)
				writeFile(t, filepath.Join(dir, "parsed.env"), []byte(FormatEnv(parsed.Canonical())))
			}
			want, err := os.ReadFile(filepath.Join(dir, "limits"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("rendered file differs\n--- got\n%s--- want\n%s", got, want)
			}
			fromFile := Parse(want)
			if len(fromFile.Bad) != 0 {
				t.Errorf("valid vector has bad lines: %+v", fromFile.Bad)
			}
			wantParsed, err := os.ReadFile(filepath.Join(dir, "parsed.env"))
			if err != nil {
				t.Fatal(err)
			}
			if g := FormatEnv(fromFile.Canonical()); g != string(wantParsed) {
				t.Errorf("parsed.env differs\n--- got\n%s--- want\n%s", g, wantParsed)
			}
		})
	}
}

// TestMalformedVectors runs the tolerant parser over the hand-damaged files
// (written for the C reader); both readers must skip the same lines and
// derive the same variables.
func TestMalformedVectors(t *testing.T) {
	dirs := caseDirs(t, "malformed")
	if len(dirs) == 0 {
		t.Fatal("no testdata/limits/malformed vectors found: the C and Go readers would go uncompared")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(dir, "limits"))
			if err != nil {
				t.Fatal(err)
			}
			p := Parse(data)
			wantParsed, err := os.ReadFile(filepath.Join(dir, "parsed.env"))
			if err != nil {
				t.Fatal(err)
			}
			if g := FormatEnv(p.Canonical()); g != string(wantParsed) {
				t.Errorf("parsed.env differs\n--- got\n%s--- want\n%s", g, wantParsed)
			}
			var want []int
			if raw, err := os.ReadFile(filepath.Join(dir, "skipped")); err == nil {
				for _, f := range strings.Fields(string(raw)) {
					n, err := strconv.Atoi(f)
					if err != nil {
						t.Fatalf("skipped: %v", err)
					}
					want = append(want, n)
				}
			} else if !os.IsNotExist(err) {
				t.Fatal(err)
			}
			if got := p.Skipped(); !slices.Equal(got, want) {
				t.Errorf("skipped lines = %v, want %v (reasons %+v)", got, want, p.Bad)
			}
		})
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
