// Package flagenv gives every flag of a FlagSet an UPPER_SNAKE environment
// twin: --kubelet-socket reads KUBELET_SOCKET. Precedence: an explicit flag,
// then the environment, then the default.
package flagenv

import (
	"flag"
	"fmt"
	"strings"
)

// EnvName returns the environment twin of a flag name.
func EnvName(flagName string) string {
	return strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args, then applies environment values (from getenv) to every
// flag that was not given on the command line. Flags in skip (e.g. klog's
// "v") get no twin.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string, skip ...string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, s := range skip {
		set[s] = true
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || set[f.Name] {
			return
		}
		if v := getenv(EnvName(f.Name)); v != "" {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("environment %s=%q (flag --%s): %w", EnvName(f.Name), v, f.Name, serr)
			}
		}
	})
	return err
}

// Usage appends the env twin to every flag's usage text.
func Usage(fs *flag.FlagSet, skip ...string) {
	s := map[string]bool{}
	for _, n := range skip {
		s[n] = true
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !s[f.Name] {
			f.Usage += " [$" + EnvName(f.Name) + "]"
		}
	})
}
