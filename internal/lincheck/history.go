package lincheck

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

// History records the calls of many goroutines, each through a Client of
// its own, with the instants each began and ended: stamps from one
// counter, taken just before a call and just after it returns, so that
// one call that returned before another began has the smaller stamps.
// The fake clock's reading when each call began is kept too.
//
// A History needs no lock: each Client keeps its own records, and
// Operations, called once every client is done (after a WaitGroup's Wait,
// say), reads them all.
type History struct {
	clock   *clock.Fake
	origin  time.Time
	stamp   atomic.Int64
	ids     atomic.Int64
	clients []*Client
	store   bool
	sent    chan sent    // the requests Stores were handed (ObserveStore)
	lost    atomic.Int64 // those sent had no room for
	sentLog []sent       // the same, once Operations reads them
}

// NewHistory returns a history of calls to routers on clk, whose
// timeline starts at origin; store says that they have a Store (their
// leavers' grants are given back later: see Model).
func NewHistory(clk *clock.Fake, origin time.Time, store bool) *History {
	return &History{clock: clk, origin: origin, store: store}
}

// Client returns a new client, for one goroutine.
func (h *History) Client() *Client {
	c := &Client{h: h, id: len(h.clients)}
	h.clients = append(h.clients, c)
	return c
}

// ID returns a number no other call of h has.
func (h *History) ID() int { return int(h.ids.Add(1)) }

// Client records the calls of one goroutine.
type Client struct {
	h    *History
	id   int
	recs []record
}

type record struct {
	in        Input
	out       Output
	call, ret int64
	reading   time.Duration // the clock's when the call began
	ended     time.Duration // the clock's once it returned
}

// Call is a call under way.
type Call struct {
	stamp   int64
	reading time.Duration
}

// Begin notes that a call begins, and returns it.
func (c *Client) Begin() Call {
	stamp := c.h.stamp.Add(1)
	return Call{stamp: stamp, reading: c.h.clock.Since(c.h.origin)}
}

// End notes that call, begun with Begin, ended: in and out are what it
// was and what it returned.
func (c *Client) End(call Call, in Input, out Output) {
	ret := c.h.stamp.Add(1)
	ended := c.h.clock.Since(c.h.origin)
	c.recs = append(c.recs, record{in: in, out: out, call: call.stamp, ret: ret, reading: call.reading, ended: ended})
}

// EndAll notes that call ended as several operations, ins, with outs,
// all with its span: a WaitN's Join and Done, a batch's parts.
func (c *Client) EndAll(call Call, ins []Input, outs []Output) {
	ret := c.h.stamp.Add(1)
	ended := c.h.clock.Since(c.h.origin)
	for i := range ins {
		c.recs = append(c.recs, record{in: ins[i], out: outs[i], call: call.stamp, ret: ret, reading: call.reading, ended: ended})
	}
}

// Advance moves the clock by d, recorded as a call.
func (c *Client) Advance(d time.Duration) {
	call := c.Begin()
	c.h.clock.Advance(d)
	c.End(call, Input{Kind: Advance, At: c.h.clock.Since(c.h.origin)}, Output{})
}

// Len returns the calls c has recorded.
func (c *Client) Len() int { return len(c.recs) }

// Operations returns the history, for the checker. With a Store: the own
// times each call may have been sent with (Input.Times: see
// ObserveStore; without it, the clock's readings while it ran); a call
// whose effect may come after it returned (its caller left, or it
// failed) open until the calls that could carry it returned, or for
// ever; for each caller who left a GiveBack, which the model places
// after its request, open likewise; and what an observed Store shows to
// have done nothing left out (a request never handed to it, a give-back
// never sent, a Peek unanswered).
func (h *History) Operations() []porcupine.Operation {
	var advances []record
	for _, c := range h.clients {
		for _, r := range c.recs {
			if r.in.Kind == Advance {
				advances = append(advances, r)
			}
		}
	}
	var ops []porcupine.Operation
	for _, c := range h.clients {
		for _, r := range c.recs {
			in, ret := r.in, r.ret
			if in.Kind != Advance && h.store {
				reqs := h.requests(r)
				if r.out.Outcome != Answered && (in.Kind == Peek || h.sent != nil && len(reqs) == 0) {
					continue // a Peek tells nothing if unanswered; a request never sent did nothing
				}
				for _, s := range reqs {
					in.Times = append(in.Times, s.at)
				}
				if len(in.Times) == 0 {
					in.Times = []time.Duration{r.reading}
					for _, a := range advances {
						if a.call < r.ret && a.in.At > r.reading {
							in.Times = append(in.Times, a.in.At)
						}
					}
				}
				slices.Sort(in.Times)
				in.Times = slices.Compact(in.Times)
				switch r.out.Outcome {
				case Left: // its request, if it went, took effect once the calls that could carry it returned
					ret = max(r.ret, landed(reqs, h.sent != nil))
				case Unknown:
					ret = open
				}
			}
			ops = append(ops, porcupine.Operation{ClientId: c.id, Input: in, Call: r.call, Output: r.out, Return: ret})
			gb := Input{Kind: GiveBack, Key: in.Key, N: in.N, ID: in.ID, Router: in.Router}
			if h.store && r.out.Outcome == Left && (in.Kind == Allow || in.Kind == Wait) && (h.sent == nil || h.wasSent(gb, chanlimit.StoreGiveBack, r.call)) {
				ops = append(ops, porcupine.Operation{ClientId: len(h.clients), Input: gb, Call: r.call, Output: Output{}, Return: h.sentBack(gb, r.call)}) // a row of their own
			}
		}
	}
	return ops
}

// sent is a request a Store was handed: its key, kind and units, its own
// time, the last stamp taken when it was handed over and the first taken
// after the call that carried it returned (open: if it failed, since
// Redis may run it later still).
type sent struct {
	router      int
	key         string
	kind        chanlimit.StoreOpKind
	n           int
	at          time.Duration
	start, done int64

	// What the store answered, for the story of a violation (StoreLog).
	d     chanlimit.Decision
	err   error
	grant uint64
}

// open is the Return of an operation whose effect may come at any time
// after its call.
const open = int64(math.MaxInt64 / 2)

// maxSent bounds the requests a Store wrapped by ObserveStore keeps.
const maxSent = 1 << 16

// loggingStore is a Store that keeps what it is handed (ObserveStore).
type loggingStore struct {
	chanlimit.Store
	h      *History
	router int
}

// ObserveStore returns s, the Store of the router Workload.Routers holds
// at router, keeping each request the router hands it, for Operations:
// the time a call was sent with is one of those of the requests of its
// kind, key and units that its router handed the store while it ran, usually one, where the clock's readings while it ran are
// many (a waiter's turn is even sent with the instant its line was due,
// which is no reading at all); and a request whose caller left, or the
// grant given back for it, took effect by the time the store's calls that
// could have carried it returned, unless one of them failed.
func (h *History) ObserveStore(s chanlimit.Store, router int) chanlimit.Store {
	if h.sent == nil {
		h.sent = make(chan sent, maxSent)
	}
	return loggingStore{s, h, router}
}

func (s loggingStore) Decide(ctx context.Context, ops []chanlimit.StoreOp) {
	start := s.h.stamp.Load()
	s.Store.Decide(ctx, ops)
	done := s.h.stamp.Add(1)
	for i := range ops {
		op := &ops[i]
		if op.Now.IsZero() {
			continue
		}
		e := sent{router: s.router, key: op.Key, kind: op.Kind, n: op.N, at: op.Now.Sub(s.h.origin), start: start, done: done, d: op.Decision, err: op.Err, grant: op.Grant}
		if op.Err != nil {
			e.done = open
		}
		select {
		case s.h.sent <- e:
		default: // full: Lost tells
			s.h.lost.Add(1)
		}
	}
}

// Lost returns how many requests the Stores observed were handed that h
// had no room to keep (maxSent): a history that lost any tells the search
// too little to be checked.
func (h *History) Lost() int { return int(h.lost.Load()) }

// StoreLog tells, for the story of a violation through a Store, the
// requests h's Stores were handed on key, in the order their calls began,
// with the stamps between which each call ran ("open": it failed, and
// Redis may run it yet) and what the store answered. Called once every
// router is closed, as Operations is.
func (h *History) StoreLog(key string) string {
	var reqs []sent
	for _, s := range h.log() {
		if s.key == key {
			reqs = append(reqs, s)
		}
	}
	slices.SortStableFunc(reqs, func(a, b sent) int { return cmp.Compare(a.start, b.start) })
	var b strings.Builder
	for _, s := range reqs {
		fmt.Fprintf(&b, "  [%d..%s] r%d %v(%q, %d) sent at %v → ", s.start, stamp(s.done), s.router, storeKind(s.kind), s.key, s.n, s.at)
		switch {
		case s.err != nil:
			fmt.Fprintf(&b, "error: %v\n", s.err)
		case s.kind == chanlimit.StoreDryRun:
			fmt.Fprintf(&b, "would deny: %v\n", s.d.WouldDeny)
		case s.kind == chanlimit.StoreAllow || s.kind == chanlimit.StorePeek || s.kind == chanlimit.StoreTurn:
			fmt.Fprintf(&b, "%s (grant %d)\n", decision(s.d), s.grant)
		case s.kind == chanlimit.StoreGiveBack:
			fmt.Fprintf(&b, "ok (grant %d)\n", s.grant)
		default:
			b.WriteString("ok\n")
		}
	}
	return b.String()
}

// Listing tells the operations of history on key, in the order they
// began, with the stamps between which each may take effect ("open": at
// any time after it began), for the story of a violation.
func Listing(history []porcupine.Operation, key string) string {
	var ops []porcupine.Operation
	for _, op := range history {
		if in := op.Input.(Input); in.Kind != Advance && in.Key == key {
			ops = append(ops, op)
		}
	}
	slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	var b strings.Builder
	for _, op := range ops {
		fmt.Fprintf(&b, "  [%d..%s] %s\n", op.Call, stamp(op.Return), describe(op.Input.(Input), op.Output.(Output)))
	}
	return b.String()
}

// storeKind names k as the store's API does.
func storeKind(k chanlimit.StoreOpKind) string {
	switch k {
	case chanlimit.StoreAllow:
		return "StoreAllow"
	case chanlimit.StorePeek:
		return "StorePeek"
	case chanlimit.StoreRefund:
		return "StoreRefund"
	case chanlimit.StoreReset:
		return "StoreReset"
	case chanlimit.StoreTurn:
		return "StoreTurn"
	case chanlimit.StoreGiveBack:
		return "StoreGiveBack"
	case chanlimit.StoreDryRun:
		return "StoreDryRun"
	case chanlimit.StoreHold:
		return "StoreHold"
	}
	return "StoreOpKind(" + strconv.Itoa(int(k)) + ")"
}

// stamp writes a stamp out: "open" for open.
func stamp(s int64) string {
	if s >= open {
		return "open"
	}
	return strconv.FormatInt(s, 10)
}

// log returns the requests h's Stores were handed, once they are all in.
func (h *History) log() []sent {
	if h.sentLog == nil && h.sent != nil {
		h.sentLog = []sent{}
		for len(h.sent) > 0 {
			h.sentLog = append(h.sentLog, <-h.sent)
		}
	}
	return h.sentLog
}

// requests returns the requests that h's Stores were handed that may
// have been r's (none if no Store was observed): of its kind, key and
// units, from its router, handed over after its call began, and before
// it returned if answered. A request whose caller left, or that failed,
// may have been handed over later still, but never with an own time
// after the clock's reading once it returned: a partition reads the
// time it sends a request with before it looks whether its caller left,
// which its caller marks before it returns. A waiter's turn, sent with
// the instant its line was due, is bound so only once it failed.
func (h *History) requests(r record) []sent {
	var out []sent
	bounded := r.out.Outcome == Unknown || r.out.Outcome == Left && r.in.Kind != Wait
	for _, s := range h.log() {
		if s.router != r.in.Router || s.key != r.in.Key || s.n != r.in.N || !sentAs(r.in.Kind, s.kind) || s.start < r.call {
			continue
		}
		if r.out.Outcome == Answered && s.start > r.ret || bounded && s.at > r.ended {
			continue
		}
		out = append(out, s)
	}
	return out
}

// landed returns the stamp by which the requests reqs took effect: the
// latest return of the Stores' calls that carried them; open if one of
// them failed, or if none was observed.
func landed(reqs []sent, observed bool) int64 {
	by := int64(-1)
	for _, s := range reqs {
		by = max(by, s.done)
	}
	if by < 0 || !observed {
		return open
	}
	return by
}

// wasSent reports whether a request for in, as kind, may have been handed
// to a Store after call: false once none of its kind on its key, of its
// units, from its router was.
func (h *History) wasSent(in Input, kind chanlimit.StoreOpKind, call int64) bool {
	for _, s := range h.log() {
		if s.router == in.Router && s.key == in.Key && s.n == in.N && s.start >= call && s.kind == kind {
			return true
		}
	}
	return false
}

// sentBack returns the stamp by which a give-back for in, sent after
// call, took effect if it was sent: the latest return of the Stores'
// calls that could have carried it; open if one of them failed, or if
// none was observed.
func (h *History) sentBack(in Input, call int64) int64 {
	var reqs []sent
	for _, s := range h.log() {
		if s.router == in.Router && s.key == in.Key && s.n == in.N && s.start >= call && s.kind == chanlimit.StoreGiveBack {
			reqs = append(reqs, s)
		}
	}
	return landed(reqs, true)
}

// sentAs reports whether a call of kind goes to a Store as a request of
// kind k.
func sentAs(kind Kind, k chanlimit.StoreOpKind) bool {
	switch kind {
	case Allow:
		return k == chanlimit.StoreAllow
	case Peek:
		return k == chanlimit.StorePeek
	case Refund:
		return k == chanlimit.StoreRefund
	case Reset:
		return k == chanlimit.StoreReset
	case Wait:
		return k == chanlimit.StoreTurn
	case Hold:
		return k == chanlimit.StoreHold
	}
	return false
}
