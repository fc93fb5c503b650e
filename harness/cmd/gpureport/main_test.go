package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGPUReportIsLimitbedGPU: the lean binary runs the same commands, with the same exit statuses.
func TestGPUReportIsLimitbedGPU(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "compare") {
		t.Errorf("no arguments: exit %d, %q", code, errb.String())
	}
	dir := t.TempDir()
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"record", "--run", dir, "--section", "s", "--check", "c", "--figure", "2", "--hi", "1"}, &out, &errb); code != 0 ||
		!strings.HasPrefix(out.String(), "FAIL s ") {
		t.Errorf("record: exit %d, out %q, err %q", code, out.String(), errb.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "records", "s.jsonl")); err != nil {
		t.Error(err)
	}
	errb.Reset()
	if code := run(context.Background(), []string{"compare", "x"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "gpureport compare: usage") {
		t.Errorf("compare x: exit %d, %q", code, errb.String())
	}
}
