// Package promlimit exports a chanlimit.Router's Stats to Prometheus: a
// prometheus.Collector that asks the router for its Stats on each scrape,
// and on nothing else, so the requests the router decides pay nothing
// for being measured.
//
//	prometheus.MustRegister(promlimit.New(router, promlimit.Options{}))
package promlimit

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chanlimit/chanlimit"
)

// Options configure a Collector; the zero Options are the defaults.
type Options struct {
	// Namespace prefixes every metric's name; "" means "chanlimit".
	Namespace string

	// ConstLabels are added to every metric, to tell several routers of
	// one process apart (for example {"router": "api"}).
	ConstLabels prometheus.Labels

	// Timeout bounds how long a scrape waits for the router's partitions
	// to answer (each answers between two of its requests); 0 (or less)
	// means DefaultTimeout. A scrape that times out, or meets a closed
	// router, reports the error to Prometheus, which fails the scrape.
	Timeout time.Duration
}

// DefaultTimeout is the Timeout of Options that leave it 0.
const DefaultTimeout = 5 * time.Second

// Collector is a prometheus.Collector of one router's Stats. Its metrics,
// with the default namespace:
//
//	chanlimit_decisions_total{result}    counter: allowed, denied, refused (ErrTooManyKeys), panicked (an algorithm or the clock)
//	chanlimit_keys{state}                gauge: keys held, active or idle
//	chanlimit_queued_requests            gauge: requests waiting in mailboxes
//	chanlimit_partition_queued_requests{partition} gauge: the same, per partition (its mailbox depth)
//	chanlimit_waiting_requests           gauge: WaitN calls waiting in line
//	chanlimit_overrides                  gauge: keys with an override
//	chanlimit_keys_expired_total         counter: idle keys let go
//	chanlimit_keys_evicted_total         counter: keys evicted (EvictLRU)
//	chanlimit_store_errors_total         counter: requests a remote store failed to answer
//	chanlimit_would_deny_total           counter: decisions a dry-run policy would have denied
//	chanlimit_policy_denied_total{policy}     counter: denials each policy decided (Stats.Policies)
//	chanlimit_policy_would_deny_total{policy} counter: decisions each dry-run policy would have denied
//	chanlimit_observe_panics_total       counter: panics of Config.Observe, recovered
//
// The policy series have one value of the label for each name of
// Stats.Policies: at most chanlimit.MaxPolicyStats names and "other".
type Collector struct {
	router  *chanlimit.Router
	timeout time.Duration

	decisions, keys, queued, partitionQueued, waiting, overrides, expired, evicted, storeErrors, wouldDeny *prometheus.Desc
	policyDenied, policyWouldDeny, observePanics                                                           *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector of r's Stats, to register with a
// prometheus.Registerer.
func New(r *chanlimit.Router, opts Options) *Collector {
	ns := cmp.Or(opts.Namespace, "chanlimit")
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, labels, opts.ConstLabels)
	}
	return &Collector{
		router:          r,
		timeout:         timeoutOf(opts.Timeout),
		decisions:       desc("decisions_total", "Requests answered, by result: allowed, denied, refused (no room for a new key), panicked (an algorithm or the clock panicked).", "result"),
		keys:            desc("keys", "Keys held, by state: active, or idle and yet to expire.", "state"),
		queued:          desc("queued_requests", "Requests waiting in the partitions' mailboxes."),
		partitionQueued: desc("partition_queued_requests", "Requests waiting in one partition's mailbox: its depth.", "partition"),
		waiting:         desc("waiting_requests", "WaitN calls waiting in line for their grant."),
		overrides:       desc("overrides", "Keys with an override of the router's policies."),
		expired:         desc("keys_expired_total", "Idle keys let go."),
		evicted:         desc("keys_evicted_total", "Keys evicted, not idle, to make room for a new key (EvictLRU)."),
		storeErrors:     desc("store_errors_total", "Requests a remote store failed to answer."),
		wouldDeny:       desc("would_deny_total", "Decisions a dry-run policy would have denied, allowed or not: whom a limit in dry run would refuse."),
		policyDenied:    desc("policy_denied_total", "Denials each policy decided, by the policy's name.", "policy"),
		policyWouldDeny: desc("policy_would_deny_total", "Decisions each dry-run policy would have denied, by the policy's name.", "policy"),
		observePanics:   desc("observe_panics_total", "Panics of the router's Observe function, recovered."),
	}
}

// timeoutOf returns the Timeout of Options whose field is t.
func timeoutOf(t time.Duration) time.Duration {
	if t <= 0 {
		return DefaultTimeout
	}
	return t
}

// Describe sends the descriptions of every metric the Collector makes.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
}

func (c *Collector) descs() []*prometheus.Desc {
	return []*prometheus.Desc{c.decisions, c.keys, c.queued, c.partitionQueued, c.waiting, c.overrides, c.expired, c.evicted, c.storeErrors, c.wouldDeny,
		c.policyDenied, c.policyWouldDeny, c.observePanics}
}

// Collect asks the router for its Stats and sends them as metrics. If the
// router cannot answer (it is closed, or Timeout passed), it sends an
// invalid metric for each description, with the error, which fails the
// scrape rather than reporting figures that are not there.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if c.router == nil {
		c.invalid(ch, errNoRouter)
		return
	}
	st, err := c.router.Stats(ctx)
	if err != nil {
		c.invalid(ch, err)
		return
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	counter(c.decisions, st.Allowed, "allowed")
	counter(c.decisions, st.Denied, "denied")
	counter(c.decisions, st.Refused, "refused")
	counter(c.decisions, st.Panicked, "panicked")
	gauge(c.keys, st.Keys, "active")
	gauge(c.keys, st.Idle, "idle")
	gauge(c.queued, st.Queued)
	for i, p := range st.Partitions {
		gauge(c.partitionQueued, p.Queued, strconv.Itoa(i))
	}
	gauge(c.waiting, st.Waiting)
	gauge(c.overrides, st.Overrides)
	counter(c.expired, st.Expired)
	counter(c.evicted, st.Evicted)
	counter(c.storeErrors, st.StoreErrors)
	counter(c.wouldDeny, st.WouldDeny)
	for _, p := range st.Policies {
		counter(c.policyDenied, p.Denied, p.Name)
		counter(c.policyWouldDeny, p.WouldDeny, p.Name)
	}
	counter(c.observePanics, st.ObservePanics)
}

// invalid sends an invalid metric with err for each description.
func (c *Collector) invalid(ch chan<- prometheus.Metric, err error) {
	for _, d := range c.descs() {
		ch <- prometheus.NewInvalidMetric(d, err)
	}
}

// errNoRouter is the error of a Collector given no Router.
var errNoRouter = errors.New("promlimit: New was given a nil *chanlimit.Router")
