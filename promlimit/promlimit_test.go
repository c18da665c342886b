package promlimit_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/promlimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestCollect: the figures of a router on a fake clock, after a known
// sequence of requests, as a scrape exposes them.
func TestCollect(t *testing.T) {
	clk := clock.NewFake(epoch)
	r, err := chanlimit.New(chanlimit.Config{Limit: 2, Window: time.Second, Partitions: 2, MaxKeys: 4, Clock: clk})
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()

	// Each partition holds 2 keys at most. a is allowed 2, then denied
	// once; then keys are tried until both partitions are full and one
	// key has found its partition full (the keys' partitions depend on
	// the router's hash seed: the first three may fill both exactly).
	for _, key := range []string{"a", "a", "a"} {
		r.Allow(key)
	}
	held, refused := 1, 0
	for i := 0; held < 4 || refused == 0; i++ {
		if _, err := r.AllowN(ctx, strconv.Itoa(i), 1); err == nil {
			held++
		} else {
			require.ErrorIs(t, err, chanlimit.ErrTooManyKeys)
			refused++
		}
	}
	st, err := r.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, st.Keys)
	require.NotZero(t, st.Refused)
	require.NoError(t, r.SetOverride(ctx, "vip", chanlimit.Policy{Name: "vip", Limit: 100, Window: time.Second}))

	// One caller waiting in line on a, whose tokens are gone.
	waited := make(chan error, 1)
	wctx, cancel := context.WithCancel(ctx)
	go func() { waited <- r.Wait(wctx, "a") }()
	require.NoError(t, clk.BlockUntilContext(ctx, 1))

	c := promlimit.New(r, promlimit.Options{ConstLabels: prometheus.Labels{"router": "api"}})
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)

	want := `
# HELP chanlimit_decisions_total Requests answered, by result: allowed, denied, refused (no room for a new key), panicked (an algorithm or the clock panicked).
# TYPE chanlimit_decisions_total counter
chanlimit_decisions_total{result="allowed",router="api"} 5
chanlimit_decisions_total{result="denied",router="api"} 1
chanlimit_decisions_total{result="panicked",router="api"} 0
chanlimit_decisions_total{result="refused",router="api"} ` + strconv.FormatUint(st.Refused, 10) + `
# HELP chanlimit_keys Keys held, by state: active, or idle and yet to expire.
# TYPE chanlimit_keys gauge
chanlimit_keys{router="api",state="active"} 4
chanlimit_keys{router="api",state="idle"} 0
# HELP chanlimit_overrides Keys with an override of the router's policies.
# TYPE chanlimit_overrides gauge
chanlimit_overrides{router="api"} 1
# HELP chanlimit_partition_queued_requests Requests waiting in one partition's mailbox: its depth.
# TYPE chanlimit_partition_queued_requests gauge
chanlimit_partition_queued_requests{partition="0",router="api"} 0
chanlimit_partition_queued_requests{partition="1",router="api"} 0
# HELP chanlimit_queued_requests Requests waiting in the partitions' mailboxes.
# TYPE chanlimit_queued_requests gauge
chanlimit_queued_requests{router="api"} 0
# HELP chanlimit_waiting_requests WaitN calls waiting in line for their grant.
# TYPE chanlimit_waiting_requests gauge
chanlimit_waiting_requests{router="api"} 1
# HELP chanlimit_keys_expired_total Idle keys let go.
# TYPE chanlimit_keys_expired_total counter
chanlimit_keys_expired_total{router="api"} 0
# HELP chanlimit_keys_evicted_total Keys evicted, not idle, to make room for a new key (EvictLRU).
# TYPE chanlimit_keys_evicted_total counter
chanlimit_keys_evicted_total{router="api"} 0
# HELP chanlimit_store_errors_total Requests a remote store failed to answer.
# TYPE chanlimit_store_errors_total counter
chanlimit_store_errors_total{router="api"} 0
# HELP chanlimit_would_deny_total Decisions a dry-run policy would have denied, allowed or not: whom a limit in dry run would refuse.
# TYPE chanlimit_would_deny_total counter
chanlimit_would_deny_total{router="api"} 0
# HELP chanlimit_policy_denied_total Denials each policy decided, by the policy's name.
# TYPE chanlimit_policy_denied_total counter
chanlimit_policy_denied_total{policy="default",router="api"} 1
chanlimit_policy_denied_total{policy="vip",router="api"} 0
# HELP chanlimit_policy_would_deny_total Decisions each dry-run policy would have denied, by the policy's name.
# TYPE chanlimit_policy_would_deny_total counter
chanlimit_policy_would_deny_total{policy="default",router="api"} 0
chanlimit_policy_would_deny_total{policy="vip",router="api"} 0
# HELP chanlimit_observe_panics_total Panics of the router's Observe function, recovered.
# TYPE chanlimit_observe_panics_total counter
chanlimit_observe_panics_total{router="api"} 0
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want)))

	// Time passes: the keys become idle, then expire; the waiter is served.
	clk.Advance(time.Minute)
	require.NoError(t, <-waited)
	cancel()
	clk.Advance(time.Minute)
	r.Allow("a") // a burst, after which the partition expires idle keys
	assert.Equal(t, 1, testutil.CollectAndCount(c, "chanlimit_waiting_requests"))
	assert.Equal(t, float64(0), gather(t, c, "chanlimit_waiting_requests"))
	assert.Equal(t, float64(7), gather(t, c, "chanlimit_decisions_total", "result", "allowed"), "and the waiter's grant")
	assert.Positive(t, gather(t, c, "chanlimit_keys_expired_total"), "a's partition let its idle keys go")
}

// gather returns the value of the metric name whose labels include the
// given name-value pairs.
func gather(t *testing.T, c prometheus.Collector, name string, labels ...string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				if !found {
					continue metrics
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s %v", name, labels)
	return 0
}

// TestScrapeFailsOnAClosedRouter: figures that cannot be read fail the
// scrape, with the router's error, rather than reporting zeros.
func TestScrapeFailsOnAClosedRouter(t *testing.T) {
	r, err := chanlimit.New(chanlimit.Config{Limit: 2, Window: time.Second, Clock: clock.NewFake(epoch)})
	require.NoError(t, err)
	require.NoError(t, r.Close())
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(promlimit.New(r, promlimit.Options{})))
	_, err = reg.Gather()
	require.ErrorContains(t, err, chanlimit.ErrClosed.Error())

	reg = prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(promlimit.New(nil, promlimit.Options{Namespace: "other"})))
	_, err = reg.Gather()
	require.ErrorContains(t, err, "nil")
}

// TestWouldDeny: the decisions a dry-run policy would have denied are
// counted, whatever the enforced policies decided.
func TestWouldDeny(t *testing.T) {
	r, err := chanlimit.New(chanlimit.Config{Clock: clock.NewFake(epoch), Policies: []chanlimit.Policy{
		{Name: "second", Limit: 10, Window: time.Second},
		{Name: "stricter", Limit: 1, Window: time.Second, DryRun: true},
	}})
	require.NoError(t, err)
	defer r.Close()
	for range 3 {
		require.True(t, r.Allow("a"), "a dry-run policy denies nobody")
	}
	c := promlimit.New(r, promlimit.Options{})
	assert.Equal(t, float64(2), gather(t, c, "chanlimit_would_deny_total"))
	assert.Equal(t, float64(3), gather(t, c, "chanlimit_decisions_total", "result", "allowed"))
}
