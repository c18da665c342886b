package otellimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/otellimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var bg = context.Background()

// newRouter returns a router of cfg on a fake clock, closed when the test
// ends.
func newRouter(t *testing.T, cfg chanlimit.Config) (*chanlimit.Router, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg.Clock = clk
	r, err := chanlimit.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r, clk
}

// collect returns the metrics reader has, by name.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(bg, &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sums returns an int64 sum's points, by their attributes, as
// "k=v,k=v" in the attributes' order.
func sums(t *testing.T, m metricdata.Metrics) map[string]int64 {
	t.Helper()
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a sum of int64: %T", m.Name, m.Data)
	out := map[string]int64{}
	for _, p := range sum.DataPoints {
		out[attrs(p.Attributes)] = p.Value
	}
	return out
}

func attrs(set attribute.Set) string {
	s := ""
	for _, kv := range set.ToSlice() {
		if s != "" {
			s += ","
		}
		s += string(kv.Key) + "=" + kv.Value.String()
	}
	return s
}

// TestObserverRecordsDecisionsAndSpanEvents: each decision is counted by
// event, result and policy, a dry-run policy's would-be denials apart,
// each wait's time in the histogram, and each is an event on the
// caller's span; no attribute carries the key.
func TestObserverRecordsDecisionsAndSpanEvents(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(bg)) }()
	observe, err := otellimit.Observer(mp)
	require.NoError(t, err)
	r, _ := newRouter(t, chanlimit.Config{Observe: observe, Policies: []chanlimit.Policy{
		{Name: "second", Limit: 2, Window: time.Second},
		{Name: "trial", Limit: 1, Window: time.Hour, DryRun: true},
	}})

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { require.NoError(t, tp.Shutdown(bg)) }()
	ctx, span := tp.Tracer("test").Start(bg, "request")
	const secret = "api-key-secret"
	for range 3 {
		_, err := r.AllowN(ctx, secret, 1)
		require.NoError(t, err)
	}
	_, err = r.WaitN(ctx, "w", 1)
	require.NoError(t, err)
	require.NoError(t, r.Refund(ctx, "w", 1))
	_, err = r.AllowN(ctx, secret, 0)
	require.Error(t, err)
	span.End()

	ms := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"chanlimit.event=allow,chanlimit.policy=second,chanlimit.result=allowed": 2,
		"chanlimit.event=allow,chanlimit.policy=second,chanlimit.result=denied":  1,
		"chanlimit.event=wait,chanlimit.policy=second,chanlimit.result=allowed":  1,
		"chanlimit.event=refund,chanlimit.result=refunded":                       1,
		"chanlimit.event=allow,chanlimit.result=error":                           1,
	}, sums(t, ms["chanlimit.decisions"]))
	assert.Equal(t, map[string]int64{
		"chanlimit.event=allow,chanlimit.policy=second": 2, // the second and third requests
	}, sums(t, ms["chanlimit.would_deny"]))
	hist, ok := ms["chanlimit.wait.duration"].Data.(metricdata.Histogram[float64])
	require.True(t, ok)
	require.Len(t, hist.DataPoints, 1)
	assert.Equal(t, uint64(1), hist.DataPoints[0].Count)
	assert.Equal(t, []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}, hist.DataPoints[0].Bounds,
		"buckets for waits of a millisecond to a minute")
	assert.Equal(t, "s", ms["chanlimit.wait.duration"].Unit)

	spans := rec.Ended()
	require.Len(t, spans, 1)
	events := spans[0].Events()
	require.Len(t, events, 6, "one event a call answered")
	for _, ev := range events {
		assert.Equal(t, "chanlimit.decision", ev.Name)
		for _, kv := range ev.Attributes {
			assert.NotContains(t, kv.Value.String(), secret, "no attribute carries the key")
		}
	}
	denial := attribute.NewSet(events[2].Attributes...)
	v, ok := denial.Value("chanlimit.allowed")
	assert.True(t, ok && !v.AsBool())
	v, ok = denial.Value("chanlimit.retry_after")
	assert.True(t, ok && v.AsFloat64() > 0)
	v, ok = denial.Value("chanlimit.would_deny")
	assert.True(t, ok && v.AsBool())
}

// TestObserverCapsPolicyNames: past chanlimit.MaxPolicyStats names, a
// policy is recorded as "other".
func TestObserverCapsPolicyNames(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(bg)) }()
	observe, err := otellimit.Observer(mp)
	require.NoError(t, err)
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Hour, Observe: observe})
	names := chanlimit.MaxPolicyStats + 6
	for i := range names {
		key := fmt.Sprint("k", i)
		require.NoError(t, r.SetOverride(bg, key, chanlimit.Policy{Name: fmt.Sprintf("p%02d", i), Limit: 1, Window: time.Hour}))
		r.Allow(key)
	}
	points := sums(t, collect(t, reader)["chanlimit.decisions"])
	assert.Len(t, points, chanlimit.MaxPolicyStats+1)
	assert.Equal(t, int64(6), points["chanlimit.event=allow,chanlimit.policy=other,chanlimit.result=allowed"])
}

// TestRegisterStats: a collection reads the router's Stats; a closed
// router fails the collection, and nothing is left running once the
// registration is undone.
func TestRegisterStats(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(bg)) }()
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Hour, Partitions: 2})
	reg, err := otellimit.RegisterStats(mp, r)
	require.NoError(t, err)
	r.Allow("a")
	r.Allow("a")
	r.Allow("b")

	ms := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"chanlimit.result=allowed": 2, "chanlimit.result=denied": 1, "chanlimit.result=refused": 0, "chanlimit.result=panicked": 0,
	}, sums(t, ms["chanlimit.router.decisions"]))
	assert.Equal(t, map[string]int64{"chanlimit.policy=default": 1}, sums(t, ms["chanlimit.router.policy.denied"]))
	keys, ok := ms["chanlimit.router.keys"].Data.(metricdata.Gauge[int64])
	require.True(t, ok)
	held := map[string]int64{}
	for _, p := range keys.DataPoints {
		held[attrs(p.Attributes)] = p.Value
	}
	assert.Equal(t, map[string]int64{"chanlimit.state=active": 2, "chanlimit.state=idle": 0}, held)

	require.NoError(t, r.Close())
	var rm metricdata.ResourceMetrics
	assert.ErrorIs(t, reader.Collect(bg, &rm), chanlimit.ErrClosed)
	require.NoError(t, reg.Unregister())
}

// TestNilArguments: a nil MeterProvider or Router is an error, not a
// panic.
func TestNilArguments(t *testing.T) {
	_, err := otellimit.Observer(nil)
	assert.Error(t, err)
	_, err = otellimit.RegisterStats(nil, nil)
	assert.Error(t, err)
}

// keyInErrors is a Store whose every answer is an error naming the key,
// as a store's error may (redislimit's for a corrupt value does).
type keyInErrors struct{}

func (keyInErrors) Check([]chanlimit.Policy) error { return nil }
func (keyInErrors) FailMode() chanlimit.FailMode   { return chanlimit.FailClosed }
func (keyInErrors) Decide(_ context.Context, ops []chanlimit.StoreOp) {
	for i := range ops {
		ops[i].Err = fmt.Errorf("the store key %q holds what it cannot read", "rl:"+ops[i].Key)
	}
}

// TestSpanEventsNameAnErrorsKindNotItsText: an error's text may carry the
// key; a span event says which of chanlimit's errors it was (error.type),
// never the text.
func TestSpanEventsNameAnErrorsKindNotItsText(t *testing.T) {
	mp := sdkmetric.NewMeterProvider()
	defer func() { require.NoError(t, mp.Shutdown(bg)) }()
	observe, err := otellimit.Observer(mp)
	require.NoError(t, err)
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Hour, Store: keyInErrors{}, Observe: observe})

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { require.NoError(t, tp.Shutdown(bg)) }()
	ctx, span := tp.Tracer("test").Start(bg, "request")
	const secret = "api-key-secret"
	_, err = r.AllowN(ctx, secret, 1)
	require.ErrorContains(t, err, secret, "the caller gets the store's error as it is")
	_, err = r.AllowN(ctx, "", 0)
	require.ErrorIs(t, err, chanlimit.ErrInvalidCount)
	span.End()

	events := rec.Ended()[0].Events()
	require.Len(t, events, 2)
	var kinds []string
	for _, ev := range events {
		for _, kv := range ev.Attributes {
			assert.NotContains(t, kv.Value.String(), secret, "%s carries the key", kv.Key)
		}
		set := attribute.NewSet(ev.Attributes...)
		v, ok := set.Value("error.type")
		require.True(t, ok, "an error's event has error.type")
		kinds = append(kinds, v.AsString())
	}
	assert.Equal(t, []string{"store_unavailable", "invalid_count"}, kinds)
}
