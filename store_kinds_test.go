package chanlimit

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/chanlimit/chanlimit/internal/storetable"
)

// TestStoreKindsAreTheTables: a partition's table names what an op asks,
// and what a failure does, with the values of StoreOpKind and FailMode,
// which decider and New convert by value.
func TestStoreKindsAreTheTables(t *testing.T) {
	kinds := map[storetable.Kind]StoreOpKind{
		storetable.Allow:    StoreAllow,
		storetable.Peek:     StorePeek,
		storetable.Refund:   StoreRefund,
		storetable.Reset:    StoreReset,
		storetable.Turn:     StoreTurn,
		storetable.GiveBack: StoreGiveBack,
		storetable.DryRun:   StoreDryRun,
	}
	for k, want := range kinds {
		assert.Equal(t, want, StoreOpKind(k))
	}
	modes := map[storetable.Mode]FailMode{
		storetable.FailClosed: FailClosed,
		storetable.FailOpen:   FailOpen,
		storetable.FailLocal:  FailLocal,
	}
	for m, want := range modes {
		assert.Equal(t, want, FailMode(m))
	}
}
