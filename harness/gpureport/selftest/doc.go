// Package selftest is the GPU tier's test of itself without a GPU (its test file): the bundle
// built as make gpu-bundle builds it, unpacked, and its entry run against fakegpu — the same
// ./gpu-check, fakegpu's libraries first on the library path as the card's driver — producing the
// same report, read back: the schema, every section present, the deterministic checks passing,
// and a failure injected into one check first on the page and a regression for compare.
package selftest
