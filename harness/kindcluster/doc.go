// Package kindcluster runs the kind tier's cluster: it resolves the node image (harness/nodeimage's
// choice: kind's stock image where a registry is reachable, the offline image of
// scripts/node-image.sh otherwise; it never builds one — make e2e does, first), creates a cluster
// with the kind Go library, loads locally built images into the nodes, installs the limitbed chart
// with the Helm Go SDK, plays the HAMi scheduler's part for GPU pods (Bind), and runs commands in
// pods through the API server's exec (a sandbox.Container, so plugin/launch's methods work on pods).
//
// Everything takes an *slog.Logger; errors are returned wrapped with what was being done.
package kindcluster
