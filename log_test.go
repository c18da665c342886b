package chanlimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// TestLogDecisionsLevelsAndAttributes: LogDecisions logs each kind of
// Event at its level, with the attributes that apply and no others.
func TestLogDecisionsLevelsAndAttributes(t *testing.T) {
	denied := chanlimit.Decision{Limit: 2, RetryAfter: 1500 * time.Millisecond, Policy: "per-second"}
	steps := []struct {
		give  string
		event chanlimit.Event
		want  map[string]any
	}{
		{"a grant", chanlimit.Event{Kind: chanlimit.EventAllow, Key: "k", N: 1, Decision: chanlimit.Decision{Allowed: true, Limit: 2, Remaining: 1, Policy: "per-second"}},
			map[string]any{"level": "DEBUG", "msg": "chanlimit allow", "key": "k", "n": 1.0, "allowed": true, "policy": "per-second"}},
		{"a denial", chanlimit.Event{Kind: chanlimit.EventAllow, Key: "k", N: 2, Decision: denied},
			map[string]any{"level": "INFO", "msg": "chanlimit allow", "key": "k", "n": 2.0, "allowed": false, "policy": "per-second", "retry_after": 1.5e9}},
		{"a grant a dry-run policy would have denied", chanlimit.Event{Kind: chanlimit.EventAllow, Key: "k", N: 1, Decision: chanlimit.Decision{Allowed: true, WouldDeny: true, Limit: 2}},
			map[string]any{"level": "INFO", "msg": "chanlimit allow", "key": "k", "n": 1.0, "allowed": true, "would_deny": true}},
		{"a wait granted", chanlimit.Event{Kind: chanlimit.EventWait, Key: "w", N: 1, Decision: chanlimit.Decision{Allowed: true, Limit: 2}, Waited: time.Second},
			map[string]any{"level": "DEBUG", "msg": "chanlimit wait", "key": "w", "n": 1.0, "allowed": true, "waited": 1e9}},
		{"a wait its deadline refused", chanlimit.Event{Kind: chanlimit.EventWait, Key: "w", N: 1, Decision: denied, Err: context.DeadlineExceeded},
			map[string]any{"level": "WARN", "msg": "chanlimit wait", "key": "w", "n": 1.0, "allowed": false, "policy": "per-second", "retry_after": 1.5e9, "waited": 0.0, "err": "context deadline exceeded"}},
		{"an error", chanlimit.Event{Kind: chanlimit.EventAllow, Key: "k", N: 9, Err: errors.New("too many")},
			map[string]any{"level": "WARN", "msg": "chanlimit allow", "key": "k", "n": 9.0, "err": "too many"}},
		{"a refund", chanlimit.Event{Kind: chanlimit.EventRefund, Key: "k", N: 1},
			map[string]any{"level": "DEBUG", "msg": "chanlimit refund", "key": "k", "n": 1.0}},
	}
	for _, st := range steps {
		var buf bytes.Buffer
		log := chanlimit.LogDecisions(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
		log(context.Background(), st.event)
		var got map[string]any
		require.NoError(t, json.Unmarshal(buf.Bytes(), &got), st.give)
		delete(got, "time")
		assert.Equal(t, st.want, got, st.give)
	}
}

// TestLogDecisionsThroughARouter: a router whose Observe is LogDecisions
// at Info logs its denials, and not its grants.
func TestLogDecisionsThroughARouter(t *testing.T) {
	var buf bytes.Buffer
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second,
		Observe: chanlimit.LogDecisions(slog.New(slog.NewTextHandler(&buf, nil)))})
	assert.True(t, r.Allow("k"))
	assert.Empty(t, buf.String(), "a grant is logged at Debug")
	assert.False(t, r.Allow("k"))
	assert.Contains(t, buf.String(), `level=INFO msg="chanlimit allow" key=k n=1 allowed=false policy=default retry_after=1s`)
}
