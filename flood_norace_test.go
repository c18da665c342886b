//go:build !race

package chanlimit_test

const floodDefault = 10_000_000
