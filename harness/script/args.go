package script

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
)

// multi is a repeatable --flag=k=v.
type multi map[string]string

func (m multi) String() string { return fmt.Sprint(map[string]string(m)) }
func (m multi) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not KEY=VALUE", s)
	}
	m[k] = v
	return nil
}

// parseFlags parses args strictly: an unknown flag, a bad value or a wrong number of positional
// arguments fails the script with usage.
func parseFlags(ts *testscript.TestScript, usage string, fs *flag.FlagSet, args []string, positional int) []string {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		ts.Fatalf("%v\nusage: %s", err, usage)
	}
	if fs.NArg() != positional {
		ts.Fatalf("want %d argument(s), got %q\nusage: %s", positional, fs.Args(), usage)
	}
	return fs.Args()
}

// reorder moves flags after positional arguments to the front (flag stops at the first
// positional), so `pod allocate p1 --gpumem=3000` reads naturally.
func reorder(args []string) []string {
	var flags, pos []string
	for _, a := range args {
		if strings.HasPrefix(a, "--") {
			flags = append(flags, a)
		} else {
			pos = append(pos, a)
		}
	}
	return append(flags, pos...)
}
