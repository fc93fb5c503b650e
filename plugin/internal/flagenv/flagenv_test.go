package flagenv

import (
	"flag"
	"testing"
)

func TestParse(t *testing.T) {
	env := map[string]string{"NODE_NAME": "from-env", "SPLIT_COUNT": "7", "HOOK_PATH": "/env", "BAD_INT": "x"}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	node := fs.String("node-name", "default", "")
	split := fs.Int("split-count", 1, "")
	hook := fs.String("hook-path", "/usr/local", "")
	other := fs.String("other", "d", "")
	if err := Parse(fs, []string{"--hook-path=/flag"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if *node != "from-env" || *split != 7 || *hook != "/flag" || *other != "d" {
		t.Fatalf("node=%s split=%d hook=%s other=%s", *node, *split, *hook, *other)
	}
	fs2 := flag.NewFlagSet("t", flag.ContinueOnError)
	fs2.Int("bad-int", 0, "")
	if err := Parse(fs2, nil, func(k string) string { return env[k] }); err == nil {
		t.Fatal("bad env value accepted")
	}
}
