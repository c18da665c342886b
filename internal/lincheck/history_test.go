package lincheck

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

// answering is a Store that answers every request allowed.
type answering struct{}

func (answering) Check([]chanlimit.Policy) error { return nil }
func (answering) FailMode() chanlimit.FailMode   { return chanlimit.FailClosed }
func (answering) Decide(_ context.Context, ops []chanlimit.StoreOp) {
	for i := range ops {
		ops[i].Decision = chanlimit.Decision{Allowed: true}
	}
}

// The own times a call may have been sent with are those of the requests
// its router handed the store while it ran, and for a caller who left,
// later too, but never with a time after the clock's reading once it
// returned: a partition reads its time before it looks whether the
// caller left.
func TestOperationsBoundLeavers(t *testing.T) {
	origin := time.Unix(1_800_000_000, 0)
	clk := clock.NewFake(origin)
	h := NewHistory(clk, origin, true)
	st := h.ObserveStore(answering{}, 0)
	send := func(kind chanlimit.StoreOpKind, n int) {
		st.Decide(context.Background(), []chanlimit.StoreOp{{Kind: kind, Key: "k", N: n, Now: clk.Now()}})
	}
	leaver, other := h.Client(), h.Client()

	call := leaver.Begin()
	leaver.End(call, Input{Kind: Allow, Key: "k", N: 2, ID: 1}, Output{Outcome: Left, Err: context.Canceled})
	send(chanlimit.StoreAllow, 2) // the leaver's, sent once it left
	send(chanlimit.StoreGiveBack, 2)

	clk.Advance(100 * time.Millisecond)
	call = other.Begin()
	send(chanlimit.StoreAllow, 2) // another caller's, of the same key and units
	other.End(call, Input{Kind: Allow, Key: "k", N: 2, ID: 2}, Output{D: chanlimit.Decision{Allowed: true}})

	ops := h.Operations()
	require.Len(t, ops, 3)
	byID := map[int]porcupine.Operation{}
	for _, op := range ops {
		in := op.Input.(Input)
		byID[int(in.Kind)*100+in.ID] = op
	}
	left, gb, answered := byID[int(Allow)*100+1], byID[int(GiveBack)*100+1], byID[int(Allow)*100+2]
	assert.Equal(t, []time.Duration{0}, left.Input.(Input).Times, "not the request sent at 100 ms, after it returned at 0")
	assert.Equal(t, []time.Duration{100 * time.Millisecond}, answered.Input.(Input).Times)
	assert.Less(t, left.Return, answered.Call, "its request landed before the other call began")
	assert.Greater(t, gb.Return, gb.Call)
	assert.Less(t, gb.Return, answered.Call)
}

// A request never handed to the store did nothing, and an unanswered
// Peek tells nothing: neither is an operation.
func TestOperationsLeaveOutWhatDidNothing(t *testing.T) {
	origin := time.Unix(1_800_000_000, 0)
	clk := clock.NewFake(origin)
	h := NewHistory(clk, origin, true)
	h.ObserveStore(answering{}, 0)
	cl := h.Client()
	call := cl.Begin()
	cl.End(call, Input{Kind: Allow, Key: "k", N: 1, ID: 1}, Output{Outcome: Left, Err: context.Canceled})
	call = cl.Begin()
	cl.End(call, Input{Kind: Peek, Key: "k", N: 1}, Output{Outcome: Unknown, Err: chanlimit.ErrStoreUnavailable})
	assert.Empty(t, h.Operations())
}

// A history saved to a file loads as it was.
func TestSaveLoad(t *testing.T) {
	ops := []porcupine.Operation{
		{ClientId: 0, Call: 1, Return: 4, Input: Input{Kind: Allow, Key: "k", N: 2, ID: 1, Times: []time.Duration{0, 5}},
			Output: Output{D: chanlimit.Decision{Allowed: true, Limit: 10, Remaining: 3, ResetAfter: 200 * time.Millisecond, Policy: "p"}}},
		{ClientId: 1, Call: 2, Return: open, Input: Input{Kind: Reset, Key: "k", Times: []time.Duration{0}},
			Output: Output{Outcome: Unknown, Err: chanlimit.ErrStoreUnavailable}},
	}
	path := filepath.Join(t.TempDir(), "history.json")
	require.NoError(t, Save(path, ops))
	got, err := Load(path)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, ops[0], got[0])
	assert.Equal(t, ops[1].Input, got[1].Input)
	assert.Equal(t, ops[1].Return, got[1].Return)
	assert.EqualError(t, got[1].Output.(Output).Err, chanlimit.ErrStoreUnavailable.Error())
}

// A violation's story through a Store lists the key's calls and what the
// stores were asked and answered on it, in the order the calls began,
// with the stamps between which each ran.
func TestStoreLogAndListing(t *testing.T) {
	origin := time.Unix(1_800_000_000, 0)
	clk := clock.NewFake(origin)
	h := NewHistory(clk, origin, true)
	st := h.ObserveStore(answering{}, 1)
	clk.Advance(5 * time.Millisecond)
	st.Decide(context.Background(), []chanlimit.StoreOp{
		{Kind: chanlimit.StoreAllow, Key: "k", N: 2, Now: clk.Now()},
		{Kind: chanlimit.StoreReset, Key: "other", Now: clk.Now()},
	})
	st.Decide(context.Background(), []chanlimit.StoreOp{{Kind: chanlimit.StoreGiveBack, Key: "k", N: 2, Now: clk.Now(), Grant: 7}})
	assert.Equal(t,
		"  [0..1] r1 StoreAllow(\"k\", 2) sent at 5ms → allowed /0 left 0 (grant 0)\n"+
			"  [1..2] r1 StoreGiveBack(\"k\", 2) sent at 5ms → ok (grant 7)\n",
		h.StoreLog("k"))

	ops := []porcupine.Operation{
		{Input: Input{Kind: Reset, Key: "k", Router: 2}, Output: Output{}, Call: 4, Return: open},
		{Input: Input{Kind: Advance, At: time.Second}, Call: 1, Return: 2},
		{Input: Input{Kind: Allow, Key: "other", N: 1}, Output: Output{D: chanlimit.Decision{Allowed: true}}, Call: 0, Return: 3},
		{Input: Input{Kind: Allow, Key: "k", N: 1, Times: []time.Duration{time.Millisecond}}, Output: Output{D: chanlimit.Decision{Allowed: true, Limit: 5, Remaining: 4, Policy: "p"}}, Call: 2, Return: 3},
	}
	assert.Equal(t,
		"  [2..3] r0 AllowN(\"k\", 1) sent at one of [1ms] → allowed p/5 left 4\n"+
			"  [4..open] r2 Reset(\"k\") → ok\n",
		Listing(ops, "k"))
}
