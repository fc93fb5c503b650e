// Command e2e-node-image prints the node image the kind tier will run, for scripts/e2e.sh to build
// it before the tier's test starts:
//
//	offline REF   the offline image scripts/node-image.sh builds (build it: make node-image)
//	use REF       an image kind pulls or finds (LIMITBED_NODE_IMAGE=stock, auto with a registry, or a reference)
//
// Usage: e2e-node-image [ROOT]   (ROOT: the checkout, default the working directory)
//
// LIMITBED_NODE_IMAGE chooses (harness/nodeimage, docs/e2e.md). It is a command of its own, needing
// only the standard library and kind's defaults, so that the choice costs seconds on a cold machine.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/limitbed/limitbed/harness/nodeimage"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 1 || (len(args) == 1 && (args[0] == "-h" || args[0] == "--help")) {
		fmt.Fprintln(stderr, "usage: e2e-node-image [ROOT]  (prints \"offline REF\" or \"use REF\"; LIMITBED_NODE_IMAGE chooses)")
		return 2
	}
	root := "."
	if len(args) == 1 {
		root = args[0]
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	img, err := nodeimage.Choose(ctx, logger, root)
	if err != nil {
		fmt.Fprintf(stderr, "e2e-node-image: %v\n", err)
		return 1
	}
	verb := "use"
	if img.Offline {
		verb = "offline"
	}
	fmt.Fprintln(stdout, verb, img.Ref)
	return 0
}
