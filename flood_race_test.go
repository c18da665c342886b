//go:build race

package chanlimit_test

// The race detector slows the flood tenfold: it sends fewer keys, still ten
// times MaxKeys. .ci/run also runs the full flood without -race.
const floodDefault = 1_000_000
