package actor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/clock"
)

// TestATableWithNoOptionalInterfaces: a partition over a Table and nothing
// more (windows: AllowN, PeekN, Refund, Reset, Expire) does without each
// optional interface as table.go says: a batch is decided item by item, a
// quota tells nothing, and nothing would deny a request as a dry-run
// policy. (A grant whose caller left is given back with Refund:
// TestServeRefundsAnUndeliveredGrant, on the same table.)
func TestATableWithNoOptionalInterfaces(t *testing.T) {
	table := newWindows()
	k := keysOf(table)
	require.Nil(t, k.each)
	require.Nil(t, k.ahead)
	require.Nil(t, k.pins)
	require.Nil(t, k.quota)
	require.Nil(t, k.dry)
	require.Nil(t, k.changes)
	require.Nil(t, k.abandon)

	clk := clock.NewFake(time.Unix(0, 0))
	p := Start(table, clk, clk.Now(), 4, 0)
	defer func() { p.Stop(); <-p.Done() }()
	ctx := context.Background()

	batch := []Item{{Key: "a", N: 1}, {Key: "a", N: 1}, {Key: "a", N: 1}}
	pending, err := p.SendBatch(ctx, &batch)
	require.NoError(t, err)
	require.NoError(t, pending.Wait(ctx))
	assert.True(t, batch[0].D.Allowed)
	assert.True(t, batch[1].D.Allowed)
	assert.False(t, batch[2].D.Allowed, "the window of 2 is spent: decided in order, one by one")

	q := Quota{Set: stale{}, Policies: []PolicyQuota{{Policy: 7}}} // what a previous call left in it
	d, err := p.AllowQuota(ctx, "b", 1, &q)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.False(t, d.WouldDeny, "no dry-run policy")
	assert.Nil(t, q.Set, "a table that is no Quoter names no set")
	assert.Empty(t, q.Policies, "and tells no policy's quota")
}

// stale is a set of policies a Quota held from a call before.
type stale struct{}

func (stale) Index(string) int { return 0 }
