package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/pipeline"
)

// TestStagesTellWhatADryRunPolicyWouldDeny: both stages pass every item
// a dry-run policy alone would deny, with WouldDeny set on its Decision:
// here the items past the shadow's 2 of each key.
func TestStagesTellWhatADryRunPolicyWouldDeny(t *testing.T) {
	stages := map[string]func(context.Context, *chanlimit.Router, <-chan event) <-chan pipeline.Result[event]{
		"Police": func(ctx context.Context, r *chanlimit.Router, in <-chan event) <-chan pipeline.Result[event] {
			return pipeline.Police(ctx, r, in, keyOf, pipeline.Options[event]{})
		},
		"Throttle": func(ctx context.Context, r *chanlimit.Router, in <-chan event) <-chan pipeline.Result[event] {
			return pipeline.Throttle(ctx, r, in, keyOf, pipeline.Options[event]{})
		},
	}
	for name, stage := range stages {
		t.Run(name, func(t *testing.T) {
			r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
				{Name: "hour", Limit: 10, Window: time.Hour},
				{Name: "shadow", Algorithm: "fixed_window", Limit: 2, Window: time.Hour, DryRun: true},
			}})
			var events []event
			for i := range 8 {
				events = append(events, event{Key: []string{"a", "b"}[i%2], Seq: i})
			}
			seen := map[string]int{}
			for res := range stage(context.Background(), r, feed(events...)) {
				require.NoError(t, res.Err)
				assert.True(t, res.Decision.Allowed, "item %d", res.Item.Seq)
				seen[res.Item.Key]++
				assert.Equal(t, seen[res.Item.Key] > 2, res.Decision.WouldDeny, "item %d, the %d of %s", res.Item.Seq, seen[res.Item.Key], res.Item.Key)
			}
			st, err := r.Stats(context.Background())
			require.NoError(t, err)
			assert.EqualValues(t, 4, st.WouldDeny)
		})
	}
}
