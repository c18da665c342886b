package chanlimit

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/chanlimit/chanlimit/internal/storetable"
)

// TestStoreModesAreTheTables: a partition's table names what a failure
// does with the values of FailMode, which New converts by value. (What an
// op asks needs no such check: StoreOpKind is the table's Kind.)
func TestStoreModesAreTheTables(t *testing.T) {
	modes := map[storetable.Mode]FailMode{
		storetable.FailClosed: FailClosed,
		storetable.FailOpen:   FailOpen,
		storetable.FailLocal:  FailLocal,
	}
	for m, want := range modes {
		assert.Equal(t, want, FailMode(m))
	}
}
