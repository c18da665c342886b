package pipeline_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/pipeline"
)

// A key or Weight function that panics fails that item alone, with an
// error wrapping pipeline.ErrPanic: every other item comes out as usual,
// and the stage goes on.

// stage is Throttle or Police.
type stage func(ctx context.Context, r *chanlimit.Router, in <-chan event, key func(event) string, opts pipeline.Options[event]) <-chan pipeline.Result[event]

var stages = []struct {
	name string
	run  stage
}{
	{"Throttle", pipeline.Throttle[event]},
	{"Police", pipeline.Police[event]},
}

func TestAPanickingKeyOrWeightFailsItsItemAlone(t *testing.T) {
	key := func(e event) string {
		if e.Key == "bad key" {
			panic("no key for this one")
		}
		return e.Key
	}
	weight := func(e event) int {
		if e.Units < 0 {
			panic(errors.New("no weight for this one"))
		}
		return e.Units
	}
	for _, st := range stages {
		t.Run(st.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, _ := newRouter(t, chanlimit.Config{Limit: 10, Window: time.Second})
				in := feed(
					event{Key: "a", Seq: 0, Units: 1},
					event{Key: "bad key", Seq: 1, Units: 1},
					event{Key: "a", Seq: 2, Units: -1},
					event{Key: "b", Seq: 3, Units: 2},
					event{Key: "a", Seq: 4, Units: 3},
				)
				got, closed := ready(st.run(context.Background(), r, in, key, pipeline.Options[event]{Weight: weight}))
				require.True(t, closed, "the output closes once in is drained")
				require.ElementsMatch(t, []int{0, 1, 2, 3, 4}, seqs(got), "every item comes out once")
				for _, res := range got {
					switch res.Item.Seq {
					case 1, 2:
						assert.ErrorIs(t, res.Err, pipeline.ErrPanic, "item %d", res.Item.Seq)
						assert.ErrorContains(t, res.Err, map[int]string{1: "panic in key", 2: "panic in Weight"}[res.Item.Seq], "the error names the function that panicked")
						assert.Zero(t, res.Decision, "item %d", res.Item.Seq)
					default:
						require.NoError(t, res.Err, "item %d", res.Item.Seq)
						assert.True(t, res.Decision.Allowed, "item %d", res.Item.Seq)
					}
				}
				d, err := r.Peek(context.Background(), "a", 1)
				require.NoError(t, err)
				assert.Equal(t, 5, d.Remaining, "a's two good items took 4 of 10, its panicked one nothing: 6 left, 5 after the peeked one")
			})
		})
	}
}

// A panic's value whose String method panics: fmt tells that panic in the
// text. (One whose String panics with such a value again is told by its
// type.)
type hostile struct{ again bool }

func (h hostile) String() string {
	if h.again {
		panic(hostile{})
	}
	panic("a String that panics")
}

// TestAPanicsValueIsInItsError: the error of an item whose key panicked
// tells the panic's value, and an error value is in its chain; a value
// whose String panics, or panic(nil), still fails the item alone.
func TestAPanicsValueIsInItsError(t *testing.T) {
	cause := errors.New("the tenant table is gone")
	values := map[string]any{"text": "no key for this one", "error": cause, "hostile": hostile{}, "hostile again": hostile{again: true}, "nil": nil}
	for _, st := range stages {
		t.Run(st.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, _ := newRouter(t, chanlimit.Config{Limit: 10, Window: time.Second})
				key := func(e event) string {
					if v, ok := values[e.Key]; ok {
						panic(v)
					}
					return e.Key
				}
				in := feed(event{Key: "text", Seq: 0}, event{Key: "error", Seq: 1}, event{Key: "hostile", Seq: 2}, event{Key: "hostile again", Seq: 3}, event{Key: "nil", Seq: 4}, event{Key: "ok", Seq: 5})
				got, closed := ready(st.run(context.Background(), r, in, key, pipeline.Options[event]{}))
				require.True(t, closed)
				require.Len(t, got, 6)
				for _, res := range got {
					if res.Item.Key == "ok" {
						require.NoError(t, res.Err)
						continue
					}
					require.ErrorIs(t, res.Err, pipeline.ErrPanic, res.Item.Key)
					switch res.Item.Key {
					case "text":
						assert.ErrorContains(t, res.Err, "no key for this one")
					case "error":
						assert.ErrorIs(t, res.Err, cause)
						assert.ErrorContains(t, res.Err, cause.Error())
					case "hostile":
						assert.ErrorContains(t, res.Err, "a String that panics")
					case "hostile again":
						assert.ErrorContains(t, res.Err, "a pipeline_test.hostile, whose Error or String method panicked")
					}
				}
			})
		})
	}
}

// TestNoBufferIsSizedFromOptionsBeforeItemsArrive: MaxBatch and MaxPending
// bound what a stage holds, not what it allocates up front: a stage with
// the largest of them starts, passes items and ends with little memory.
func TestNoBufferIsSizedFromOptionsBeforeItemsArrive(t *testing.T) {
	opts := []struct {
		name string
		give pipeline.Options[event]
	}{
		{"MaxBatch=MaxInt", pipeline.Options[event]{MaxBatch: math.MaxInt}},
		{"MaxBatch=1<<28", pipeline.Options[event]{MaxBatch: 1 << 28}},
		{"MaxPending=MaxInt", pipeline.Options[event]{MaxPending: math.MaxInt}},
		{"MaxPending=1<<28", pipeline.Options[event]{MaxPending: 1 << 28}},
	}
	for _, st := range stages {
		for _, o := range opts {
			t.Run(st.name+"/"+o.name, func(t *testing.T) {
				r, _ := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second})
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				out := st.run(context.Background(), r, feed(event{Key: "a", Seq: 0}, event{Key: "b", Seq: 1}), keyOf, o.give)
				var got []pipeline.Result[event]
				for res := range out {
					got = append(got, res)
				}
				runtime.ReadMemStats(&after)
				require.Len(t, got, 2)
				for _, res := range got {
					require.NoError(t, res.Err)
				}
				assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated for two items")
			})
		}
	}
}
