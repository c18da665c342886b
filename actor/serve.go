package actor

import (
	"errors"
	"math"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/supervise"
	"github.com/chanlimit/chanlimit/internal/topk"
)

// Serving one message: its decision, its answer, its give-back when the
// caller left, and its counting.

// serve decides one request at now and delivers the answer, holding it
// as the request in flight meanwhile. If reading the clock failed with
// clockErr, the requests that need the time (AllowN, PeekN, Refund, a
// batch) fail with that error; Reset and Do need none, and go on at the latest reading
// that worked. It returns how many requests that was: a batch's items, or
// 1.
func (l *loop) serve(req *Message, now time.Duration, clockErr error) (served int) {
	if len(req.reply) > 0 {
		return 0 // the caller gave up before its turn: apply nothing
	}
	if clockErr == nil && req.kind != KindLeave && l.waits.dueBy(now) {
		// What is due comes first: a line due by now is served on its
		// schedule before anything after it is decided, even if the
		// timer has not told the partition yet (a timer fires late, and
		// select picks the mailbox or the timer at random). req waits in
		// unfinished.next meanwhile: if the rule ends the goroutine on a
		// waiter, the next serves req after answering it.
		l.unfinished.next = *req
		l.serveDue(now)
		l.unfinished.next = Message{}
	}
	// In flight until served: if code the partition calls ends the
	// goroutine meanwhile, takeOver answers it (carry_on.go).
	l.inFlight(flightOf(req))
	switch req.kind {
	case KindAllow, KindPeek:
		served = l.decide(req, now, clockErr)
	case KindWait:
		served = l.join(req, now, clockErr)
	case KindLeave:
		l.leave(*req, now)
	case KindReset, KindRefund:
		served = l.giveOrDrop(req, now, clockErr)
	case KindBatch, KindTry:
		served = l.batch(req, now, clockErr)
	case KindDo:
		served = l.do(req, now, clockErr)
	case KindHold:
		served = l.hold(req, now, clockErr)
	}
	// Answered, or in its key's line (answered there): in flight no more.
	// (The stop message never comes here: the loop takes it.)
	l.outOfFlight()
	return served
}

// Each kind of request, served: its decision, its answer, and what it
// gives back if its caller left (deliver). Each answers with answerNow,
// or leaves its request in flight for its turn.

// decide serves an AllowN or a PeekN. While its key has a line, the
// request is denied with the wait it would have in it (no barging).
func (l *loop) decide(req *Message, now time.Duration, clockErr error) (served int) {
	var r reply
	switch ln := l.waits.lineOf(req.key); {
	case clockErr != nil:
		r.err = clockErr
	case ln != nil:
		r.d, r.err = l.inLine(req.key, req.n, now, ln)
		if r.err == nil {
			l.dryInLine(req.key, req.n, now, req.kind == KindAllow, &r.d)
		}
	case req.kind == KindAllow:
		r.err = l.keys.AllowN(req.key, now, req.n, &l.scratch)
		r.d = l.scratch
	default:
		r.d, r.err = l.peek(req.key, req.n, now)
	}
	l.answerNow(req, now, &r)
	return 1
}

// join serves a WaitN: granted at once, or in its key's line until its
// turn (wait).
func (l *loop) join(req *Message, now time.Duration, clockErr error) (served int) {
	r := reply{err: clockErr}
	if clockErr == nil {
		var queued bool
		if r, queued = l.wait(*req, now); queued {
			return 1 // answered when its turn comes
		}
	}
	l.answerNow(req, now, &r)
	return 1
}

// giveOrDrop serves a Refund or a Reset; the head of the key's line may
// be granted after it. A Reset needs no time.
func (l *loop) giveOrDrop(req *Message, now time.Duration, clockErr error) (served int) {
	var r reply
	switch {
	case req.kind == KindReset:
		l.keys.Reset(req.key)
	case clockErr != nil:
		l.answerNow(req, now, &reply{err: clockErr})
		return 1
	default:
		r.err = l.keys.Refund(req.key, now, req.n)
	}
	if ln := l.waits.lineOf(req.key); ln != nil {
		l.waits.reschedule(ln, now) // its head may be granted now
	}
	l.answerNow(req, now, &r)
	return 1
}

// batch serves a batch (AllowBatch's items) or a batch of tries (each
// granted if WaitN would grant it at once), in order, each item on a key
// with a line as in line.
func (l *loop) batch(req *Message, now time.Duration, clockErr error) (served int) {
	items := *req.Items()
	switch {
	case clockErr != nil:
		for i := range items {
			items[i].D, items[i].Err = algorithms.Decision{}, clockErr
		}
	case req.kind == KindTry:
		l.tryEach(items, now)
	default:
		if len(l.waits.lines) > 0 {
			l.inLineEach(items, now, false)
		}
		l.keys.allowEach(items, now)
	}
	l.answerNow(req, now, &reply{})
	return len(items)
}

// do runs a function on the partition's state (Do), then re-decides the
// lines of the keys whose policies it changed.
func (l *loop) do(req *Message, now time.Duration, clockErr error) (served int) {
	l.state.ClockErr = clockErr
	l.state.Wall = l.timeline.Wall()
	err := req.arg.(func(*State) error)(&l.state)
	l.state.ClockErr = nil
	l.retryChanged(l.state.Now)
	l.answerNow(req, now, &reply{err: err})
	return 1
}

// hold serves a Hold: the table keeps the key from being granted anything
// until the hold's end. A line on the key needs no rescheduling: its head's
// next turn is denied until the end, with the wait to it (Turn).
func (l *loop) hold(req *Message, now time.Duration, clockErr error) (served int) {
	var r reply
	switch d := req.Hold(); {
	case clockErr != nil:
		r.err = clockErr
	case l.keys.hold == nil:
		r.err = errCannotHold
	case d > 0:
		r.err = l.keys.hold.Hold(req.key, now, saturated(now, d))
	}
	l.answerNow(req, now, &r)
	return 1
}

// saturated returns now + d, at most the largest Duration.
func saturated(now, d time.Duration) time.Duration {
	if d > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + d
}

// answerNow answers req with r, with its key's quota first if it asked
// for it. It is the last thing each kind does: serve then takes the
// request out of flight.
func (l *loop) answerNow(req *Message, now time.Duration, r *reply) {
	if req.Quota() != nil && decided(r.err) {
		l.fillQuota(req.key, now, &r.d, req.Quota())
	}
	l.deliver(req, now, r)
}

// peek returns what AllowN would answer for n units on key at now. The
// table writes into the loop's own Decision, on the heap already, so that
// nothing escapes per request.
func (l *loop) peek(key string, n int, now time.Duration) (algorithms.Decision, error) {
	err := l.keys.PeekN(key, now, n, &l.scratch)
	return l.scratch, err
}

// untilMore returns the wait of a request for remaining+1 units on key
// at now: 0 if that is above the key's capacity, or if the peek fails (a
// rule's panic, which the table has dealt with; the allowance stands).
func (l *loop) untilMore(key string, now time.Duration, remaining int) time.Duration {
	if remaining == math.MaxInt {
		return 0
	}
	d, err := l.peek(key, remaining+1, now)
	if err != nil {
		return 0
	}
	return d.RetryAfter
}

// Supervision's one mark: the request or waiter in flight, whose answer
// a goroutine that ends while serving it owes (answerInflight, in
// takeOver, pays it). Whatever serves one takes it into flight with
// inFlight, before it calls code it does not own, and out with
// outOfFlight, once it is answered or left to be answered later: serve
// (a request from the mailbox), serveLine and answer (a line's waiter).

// inFlight notes f as in flight.
func (l *loop) inFlight(f inflight) { l.inflight = f }

// outOfFlight notes that nothing is in flight: what was is answered, or
// will be, elsewhere (its key's line).
func (l *loop) outOfFlight() { l.inflight.reply = nil }

// flightOf returns req, in flight. A batch's refund mark starts past its
// last item: those not decided yet are not Allowed, and giveBack passes
// them by.
func flightOf(req *Message) inflight {
	f := inflight{reply: req.reply, ticket: req.ticket(), kind: req.kind, batch: req.Items()}
	if req.Items() != nil {
		f.refund = len(*req.Items())
	}
	return f
}

// waiterFlight returns w, in flight.
func waiterFlight(w waiter) inflight {
	return inflight{reply: w.reply, ticket: w.ticket, kind: KindWait}
}

// deliver sends r without blocking and counts it. If the caller gave up
// while the request was decided, its channel is full: the grants are then
// taken back, a batch's latest first. (A Reset or a Refund whose caller
// left stands: the caller cannot tell whether it happened, as it cannot
// for one whose answer it got just as its context ended. So does what a
// function run by Do did: see Do.)
func (l *loop) deliver(req *Message, now time.Duration, r *reply) {
	if l.state.deliver(req, r) {
		return
	}
	switch req.kind {
	case KindAllow:
		if r.d.Allowed {
			l.keys.giveBack(req.key, now, req.n)
		}
	case KindBatch, KindTry:
		l.giveBack(now)
	}
}

// giveBack refunds the grants of the batch in flight, latest first, from
// its refund mark down, but for those whose key lost its state later in
// the batch (Item.Gone). The mark passes each item before its refund, so
// that if the rule ends the goroutine there, the next one goes on after it
// and gives nothing back twice (that item's key is dropped anyway).
func (l *loop) giveBack(now time.Duration) {
	items := *l.inflight.batch
	for l.inflight.refund > 0 {
		l.inflight.refund--
		if it := &items[l.inflight.refund]; it.D.Allowed && !it.Gone {
			l.keys.giveBack(it.Key, now, it.N)
		}
	}
}

// deliver sends r to req without blocking, rings its Ticket, and counts
// it, if the caller got it; it reports whether the caller did.
func (s *State) deliver(req *Message, r *reply) bool {
	var n Counts
	n.count(req, r) // now: once sent, a batch's items are the caller's
	s.stageDenied(req, r)
	select {
	case req.reply <- *r:
		ring(req.ticket())
		c := &s.Counts
		c.Allowed += n.Allowed
		c.Denied += n.Denied
		c.Refused += n.Refused
		c.WouldDeny += n.WouldDeny
		s.commitDenied()
		return true
	default:
		clear(s.staged)
		s.staged = s.staged[:0]
		return false
	}
}

// commitDenied counts the denials staged, their answer delivered: each
// key among the keys denied, each by its policy.
func (s *State) commitDenied() {
	if len(s.staged) > 0 && s.denied == nil {
		s.denied = new(topk.Denials)
		s.denied.Tick(s.Now) // its generations start now
	}
	for _, d := range s.staged {
		s.denied.Add(d.key)
		if d.policy != "" {
			*s.deniedBy(d.policy)++
		}
	}
	clear(s.staged)
	s.staged = s.staged[:0]
}

// deniedBy returns the count of the denials policy decided: the last
// one's again at the cost of comparing two strings (a policy's name is
// most often the very string of the last denial), else from by, made
// there if new, under OtherPolicies past MaxPolicyNames names.
func (s *State) deniedBy(policy string) *uint64 {
	if policy == s.lastBy && s.lastN != nil {
		return s.lastN
	}
	n, ok := s.by[policy]
	if !ok {
		if s.by == nil {
			s.by = make(map[string]*uint64)
		}
		if len(s.by) >= MaxPolicyNames && policy != OtherPolicies {
			return s.deniedBy(OtherPolicies)
		}
		n = new(uint64)
		s.by[policy] = n
	}
	s.lastBy, s.lastN = policy, n
	return n
}

// stageDenied stages the keys that the answer r to req denies: AllowN's,
// a batch's items', a WaitN's refused at once (not a try's: its items
// not granted are to wait), but for denials by a hold: a key held was
// refused by a server, not by its own policies.
func (s *State) stageDenied(req *Message, r *reply) {
	switch req.kind {
	case KindAllow:
		if r.err == nil && !r.d.Allowed && !byHold(&r.d) {
			s.staged = append(s.staged, denial{req.key, r.d.Policy})
		}
	case KindWait:
		if _, late := r.err.(*tooLate); late && !byHold(&r.d) {
			s.staged = append(s.staged, denial{req.key, r.d.Policy})
		}
	case KindBatch:
		items := *req.Items()
		for i := range items {
			if it := &items[i]; it.Err == nil && !it.D.Allowed && !byHold(&it.D) {
				s.staged = append(s.staged, denial{it.Key, it.D.Policy})
			}
		}
	}
}

// byHold reports whether d, a denial, is one by a hold (Holder): the only
// denial no policy decided, with no Limit.
func byHold(d *algorithms.Decision) bool { return d.Limit == 0 && d.Policy == "" }

// count counts the answer r to req.
func (c *Counts) count(req *Message, r *reply) {
	switch req.kind {
	case KindAllow:
		c.note(&r.d, r.err)
	case KindWait:
		if _, late := r.err.(*tooLate); late {
			c.Denied++
		} else {
			c.note(&r.d, r.err)
		}
	case KindBatch:
		items := *req.Items()
		for i := range items { // by index: an Item is too large to copy per item
			c.note(&items[i].D, items[i].Err)
		}
	case KindTry:
		items := *req.Items()
		for i := range items {
			if it := &items[i]; it.Err != nil || it.D.Allowed {
				c.note(&it.D, it.Err)
			}
		}
	}
}

// note counts one decision or error. A panic's error counts where the
// panic does: the table counts a rule's, tick the Clock's. (It asks a
// panic's error nothing: errors.Is would call into the panic's value.)
func (c *Counts) note(d *algorithms.Decision, err error) {
	if err == nil && d.WouldDeny {
		c.WouldDeny++
	}
	switch {
	case err == nil && d.Allowed:
		c.Allowed++
	case err == nil:
		c.Denied++
	case supervise.Panicked(err):
	case errors.Is(err, ErrTooManyKeys):
		c.Refused++
	}
}
