package otellimit

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/chanlimit/chanlimit"
)

// RegisterStats reports r's Stats as observable instruments of mp, read
// once for each collection (r.Stats, through every partition's mailbox,
// with the collection's ctx) and at no other time:
//
//	chanlimit.router.keys{chanlimit.state}          gauge: keys held, active or idle
//	chanlimit.router.queued                         gauge: requests waiting in mailboxes
//	chanlimit.router.waiting                        gauge: WaitN calls waiting in line
//	chanlimit.router.overrides                      gauge: keys with an override
//	chanlimit.router.decisions{chanlimit.result}    counter: allowed, denied, refused, panicked
//	chanlimit.router.keys.expired                   counter: idle keys let go
//	chanlimit.router.keys.evicted                   counter: keys evicted (EvictLRU)
//	chanlimit.router.store.errors                   counter: requests a Store failed to answer
//	chanlimit.router.would_deny                     counter: decisions a dry-run policy would have denied
//	chanlimit.router.observe.panics                 counter: panics of Config.Observe
//	chanlimit.router.policy.denied{chanlimit.policy}     counter: Stats.Policies' Denied
//	chanlimit.router.policy.would_deny{chanlimit.policy} counter: Stats.Policies' WouldDeny
//
// A collection that cannot read r (closed, or ctx ended) reports its
// error and no figures. Unregister the Registration when r is closed.
func RegisterStats(mp metric.MeterProvider, r *chanlimit.Router) (metric.Registration, error) {
	if mp == nil || r == nil {
		return nil, errors.New("otellimit: RegisterStats: the MeterProvider or the Router is nil")
	}
	m := mp.Meter(scope)
	var err error
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, e := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		err = errors.Join(err, e)
		return g
	}
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, e := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		err = errors.Join(err, e)
		return c
	}
	keys := gauge("chanlimit.router.keys", "{key}", "Keys held, by state: active, or idle and yet to expire.")
	queued := gauge("chanlimit.router.queued", "{request}", "Requests waiting in the partitions' mailboxes.")
	waiting := gauge("chanlimit.router.waiting", "{request}", "WaitN calls waiting in line for their grant.")
	overrides := gauge("chanlimit.router.overrides", "{key}", "Keys with an override of the router's policies.")
	decisions := counter("chanlimit.router.decisions", "{decision}", "Requests answered, by result: allowed, denied, refused (no room for a new key), panicked.")
	expired := counter("chanlimit.router.keys.expired", "{key}", "Idle keys let go.")
	evicted := counter("chanlimit.router.keys.evicted", "{key}", "Keys evicted, not idle, to make room for a new key.")
	storeErrors := counter("chanlimit.router.store.errors", "{request}", "Requests a Store failed to answer.")
	wouldDeny := counter("chanlimit.router.would_deny", "{decision}", "Decisions a dry-run policy would have denied.")
	observePanics := counter("chanlimit.router.observe.panics", "{panic}", "Panics of the router's Observe, recovered.")
	policyDenied := counter("chanlimit.router.policy.denied", "{decision}", "Denials each policy decided, by the policy's name.")
	policyWouldDeny := counter("chanlimit.router.policy.would_deny", "{decision}", "Decisions each dry-run policy would have denied, by the policy's name.")
	if err != nil {
		return nil, err
	}
	state := attribute.Key("chanlimit.state")
	with := func(kvs ...attribute.KeyValue) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(kvs...))
	}
	active, idle := with(state.String("active")), with(state.String("idle"))
	allowed, denied := with(keyResult.String("allowed")), with(keyResult.String("denied"))
	refused, panicked := with(keyResult.String("refused")), with(keyResult.String("panicked"))
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		st, err := r.Stats(ctx)
		if err != nil {
			return err
		}
		o.ObserveInt64(keys, int64(st.Keys), active)
		o.ObserveInt64(keys, int64(st.Idle), idle)
		o.ObserveInt64(queued, int64(st.Queued))
		o.ObserveInt64(waiting, int64(st.Waiting))
		o.ObserveInt64(overrides, int64(st.Overrides))
		o.ObserveInt64(decisions, int64(st.Allowed), allowed)
		o.ObserveInt64(decisions, int64(st.Denied), denied)
		o.ObserveInt64(decisions, int64(st.Refused), refused)
		o.ObserveInt64(decisions, int64(st.Panicked), panicked)
		o.ObserveInt64(expired, int64(st.Expired))
		o.ObserveInt64(evicted, int64(st.Evicted))
		o.ObserveInt64(storeErrors, int64(st.StoreErrors))
		o.ObserveInt64(wouldDeny, int64(st.WouldDeny))
		o.ObserveInt64(observePanics, int64(st.ObservePanics))
		for _, p := range st.Policies {
			name := with(keyPolicy.String(p.Name))
			o.ObserveInt64(policyDenied, int64(p.Denied), name)
			o.ObserveInt64(policyWouldDeny, int64(p.WouldDeny), name)
		}
		return nil
	}, keys, queued, waiting, overrides, decisions, expired, evicted, storeErrors, wouldDeny, observePanics, policyDenied, policyWouldDeny)
}
