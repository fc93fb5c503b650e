// Package e2e is the kind tier: the device plugin, the monitor and libvgpu.so in a kind cluster with
// a real kubelet, installed by the chart, with fakegpu standing in for the GPU. The tests carry the
// build tag "kind" and run with `make e2e` (scripts/e2e.sh); see docs/e2e.md.
package e2e
