// Package otellimit reports what a chanlimit router decides to
// OpenTelemetry: Observer records each decision (Config.Observe) on
// metric instruments and as an event on the caller's span, and
// RegisterStats reports the router's Stats as observable instruments.
//
// No attribute ever carries a key: keys are many (each a series) and may
// be secrets. Policy names are capped at chanlimit.MaxPolicyStats, the
// rest recorded as "other", as Stats.Policies caps them (here the first
// names met are kept, there the first in name order).
//
// The instrument names follow OpenTelemetry's naming guidance (there is
// no semantic convention for rate limiting): a "chanlimit." namespace,
// dot-separated lower-case words, a counter named for what it counts
// (no "_total", which exporters add), units in UCUM ("{decision}", "s"),
// and attributes in the same namespace (chanlimit.policy,
// chanlimit.result, chanlimit.event), so that they never collide with
// another library's.
package otellimit

import (
	"context"
	"errors"
	"maps"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/chanlimit/chanlimit"
)

// scope is the instrumentation scope of the meters and spans' events.
const scope = "github.com/chanlimit/chanlimit/otellimit"

// The attributes' keys.
const (
	keyPolicy = attribute.Key("chanlimit.policy")
	keyResult = attribute.Key("chanlimit.result")
	keyEvent  = attribute.Key("chanlimit.event")
)

// Results, the values of chanlimit.result.
const (
	resultAllowed  = "allowed"
	resultDenied   = "denied"
	resultRefunded = "refunded"
	resultError    = "error"
)

// waitBuckets are the boundaries advised for chanlimit.wait.duration, in
// seconds: waits from a millisecond to a minute, where the SDK's default
// boundaries (0, 5, 10, ... 10,000) would put nearly all in one bucket.
var waitBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// otherPolicy is the name every policy past chanlimit.MaxPolicyStats
// distinct names is recorded under.
const otherPolicy = "other"

// Observer returns an Observe (chanlimit.Config.Observe) that records
// each Event:
//
//   - chanlimit.decisions (a counter, {decision}): each request answered,
//     by chanlimit.event (allow, wait, refund), chanlimit.result
//     (allowed, denied, refunded, error) and chanlimit.policy (the deciding
//     policy's name, Decision.Policy; none for an error or a refund);
//   - chanlimit.would_deny (a counter, {decision}): the decisions a
//     dry-run policy would have denied (Decision.WouldDeny), by
//     chanlimit.event and chanlimit.policy;
//   - chanlimit.wait.duration (a histogram, s): how long each wait
//     waited (Event.Waited), by chanlimit.result;
//   - and, if ctx carries a recording span, an event "chanlimit.decision"
//     on it with chanlimit.event, chanlimit.n, chanlimit.allowed,
//     chanlimit.would_deny, chanlimit.policy, chanlimit.retry_after (s),
//     chanlimit.waited (s) and error.type (which of the router's errors
//     it was: store_unavailable, invalid_count, key_too_long, ... or
//     _OTHER; never an error's text, which may carry the key), those
//     that apply.
//
// The first chanlimit.MaxPolicyStats policy names met are recorded as
// they are; any other as "other", so that a policy name never makes
// series without end. Recording allocates nothing in this package once a
// name's attributes are made (metric.WithAttributeSet, kept per name).
func Observer(mp metric.MeterProvider) (func(ctx context.Context, e chanlimit.Event), error) {
	if mp == nil {
		return nil, errors.New("otellimit: Observer: the MeterProvider is nil")
	}
	m := mp.Meter(scope)
	o := &observer{}
	var err, e error
	o.decisions, e = m.Int64Counter("chanlimit.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Requests a router answered, by event, result and deciding policy."))
	err = errors.Join(err, e)
	o.wouldDeny, e = m.Int64Counter("chanlimit.would_deny", metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions a dry-run policy would have denied, by event and deciding policy."))
	err = errors.Join(err, e)
	o.waited, e = m.Float64Histogram("chanlimit.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("How long each wait for a grant waited, by result."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	err = errors.Join(err, e)
	if err != nil {
		return nil, err
	}
	return o.observe, nil
}

// observer is one Observer's instruments, and the attributes it has
// made. Its tables are read with no lock, each a map never changed once
// stored: a name or a set that is new makes a copy with it, stored if no
// other caller stored one meanwhile (else made again). They stop growing
// once every policy name has been met.
type observer struct {
	decisions, wouldDeny metric.Int64Counter
	waited               metric.Float64Histogram

	sets  atomic.Pointer[map[setKey]options]  // metric.WithAttributeSet of each set met
	names atomic.Pointer[map[string]struct{}] // the policy names recorded as they are: the first MaxPolicyStats met
}

// options are the options that record with one set of attributes, as
// slices made once: a variadic call with a slice of its own makes none.
type options struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

// setKey names one set of attributes the observer records with.
type setKey struct {
	kind   chanlimit.EventKind
	result string
	policy string
	none   bool // no policy attribute
}

func (o *observer) observe(ctx context.Context, e chanlimit.Event) {
	d := &e.Decision
	result, policy := resultAllowed, o.policy(d.Policy)
	switch {
	case e.Err != nil:
		result = resultError
	case e.Kind == chanlimit.EventRefund:
		result = resultRefunded
	case !d.Allowed:
		result = resultDenied
	}
	none := e.Err != nil || e.Kind == chanlimit.EventRefund || d.Policy == ""
	o.decisions.Add(ctx, 1, o.set(setKey{kind: e.Kind, result: result, policy: policy, none: none}).add...)
	if d.WouldDeny {
		o.wouldDeny.Add(ctx, 1, o.set(setKey{kind: e.Kind, policy: policy, none: none}).add...)
	}
	if e.Kind == chanlimit.EventWait {
		o.waited.Record(ctx, e.Waited.Seconds(), o.set(setKey{result: result, none: true}).record...)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("chanlimit.decision", trace.WithAttributes(eventAttributes(&e)...))
	}
}

// policy returns the name to record a policy by: its own, for the first
// MaxPolicyStats names met, and otherwise "other". Only those names are
// kept, so the table stops growing there.
func (o *observer) policy(name string) string {
	for {
		old := o.names.Load()
		if old != nil {
			if _, ok := (*old)[name]; ok {
				return name
			}
			if len(*old) >= chanlimit.MaxPolicyStats {
				return otherPolicy
			}
		}
		names := map[string]struct{}{name: {}}
		if old != nil {
			maps.Copy(names, *old)
		}
		if o.names.CompareAndSwap(old, &names) {
			return name
		}
	}
}

// set returns the options of the attributes k names, made once.
func (o *observer) set(k setKey) options {
	for {
		old := o.sets.Load()
		if old != nil {
			if opts, ok := (*old)[k]; ok {
				return opts
			}
		}
		attrs := make([]attribute.KeyValue, 0, 3)
		if k.kind != 0 {
			attrs = append(attrs, keyEvent.String(k.kind.String()))
		}
		if k.result != "" {
			attrs = append(attrs, keyResult.String(k.result))
		}
		if !k.none {
			attrs = append(attrs, keyPolicy.String(k.policy))
		}
		opt := metric.WithAttributeSet(attribute.NewSet(attrs...))
		opts := options{add: []metric.AddOption{opt}, record: []metric.RecordOption{opt}}
		sets := map[setKey]options{k: opts}
		if old != nil {
			maps.Copy(sets, *old)
		}
		if o.sets.CompareAndSwap(old, &sets) {
			return opts
		}
	}
}

// eventAttributes returns the attributes of e's span event, those that
// apply: never its key.
func eventAttributes(e *chanlimit.Event) []attribute.KeyValue {
	d := &e.Decision
	attrs := []attribute.KeyValue{keyEvent.String(e.Kind.String()), attribute.Int("chanlimit.n", e.N)}
	if e.Kind != chanlimit.EventRefund && (d.Allowed || d.RetryAfter > 0) { // a decision: a denial has its wait (a hold's has no Limit)
		attrs = append(attrs, attribute.Bool("chanlimit.allowed", d.Allowed))
		if d.WouldDeny {
			attrs = append(attrs, attribute.Bool("chanlimit.would_deny", true))
		}
		if d.Policy != "" {
			attrs = append(attrs, keyPolicy.String(d.Policy))
		}
		if !d.Allowed {
			attrs = append(attrs, attribute.Float64("chanlimit.retry_after", d.RetryAfter.Seconds()))
		}
	}
	if e.Kind == chanlimit.EventWait {
		attrs = append(attrs, attribute.Float64("chanlimit.waited", e.Waited.Seconds()))
	}
	if e.Err != nil {
		attrs = append(attrs, attribute.String("error.type", errorType(e.Err)))
	}
	return attrs
}

// errorTypes are the errors a router's calls return, each with the value
// of error.type that names it.
var errorTypes = []struct {
	err  error
	name string
}{
	{chanlimit.ErrStoreUnavailable, "store_unavailable"},
	{chanlimit.ErrInvalidCount, "invalid_count"},
	{chanlimit.ErrExceedsCapacity, "exceeds_capacity"},
	{chanlimit.ErrKeyTooLong, "key_too_long"},
	{chanlimit.ErrTooManyKeys, "too_many_keys"},
	{chanlimit.ErrTooManyWaiters, "too_many_waiters"},
	{chanlimit.ErrAlgorithmPanic, "algorithm_panic"},
	{chanlimit.ErrClockPanic, "clock_panic"},
	{chanlimit.ErrClosed, "closed"},
	{context.DeadlineExceeded, "deadline_exceeded"},
	{context.Canceled, "canceled"},
}

// errorType returns the value of error.type for err: the name of the
// router's error it is, or "_OTHER" (OpenTelemetry's general attribute
// for the class of an error, of few values; never err's text, which may
// carry the key, as a store's error about a key's value does).
func errorType(err error) string {
	for _, t := range errorTypes {
		if errors.Is(err, t.err) {
			return t.name
		}
	}
	return "_OTHER"
}
