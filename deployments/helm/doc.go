// Package helm holds the tests of the limitbed chart in ./limitbed: lint, schema, and what the
// rendered manifests hand to the device plugin and the monitor (parsed with the plugin's own config
// package, and flags checked against the plugin binary).
package helm
