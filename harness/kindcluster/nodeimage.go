package kindcluster

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/limitbed/limitbed/harness/nodeimage"
)

// EnvNodeImage selects the node image (harness/nodeimage: offline, stock, auto or an image reference).
const EnvNodeImage = nodeimage.Env

// NodeImage is the image the cluster's nodes run.
type NodeImage = nodeimage.Image

// ResolveNodeImage picks the node image per EnvNodeImage. It never builds one: an offline image that
// is not built yet is an error naming the command that builds it. make e2e builds it first
// (scripts/e2e.sh), so that the test's deadlines cover only the cluster, never a build that takes
// tens of minutes on a cold machine.
func ResolveNodeImage(ctx context.Context, logger *slog.Logger, root string) (NodeImage, error) {
	img, err := nodeimage.Choose(ctx, logger, root)
	if err != nil {
		return NodeImage{}, fmt.Errorf("choose the node image: %w", err)
	}
	if img.Offline && !nodeimage.Present(ctx, img.Ref) {
		return NodeImage{}, fmt.Errorf("the offline node image %s is not built: make e2e builds it before its tests start "+
			"(or make node-image alone; docs/e2e.md)", img.Ref)
	}
	return img, nil
}
