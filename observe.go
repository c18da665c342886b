package chanlimit

import (
	"context"
	"strconv"
	"time"

	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/supervise"
)

// Event is one request a router answered, as Config.Observe is told of
// it: once for each request answered, after the answer came and before
// the call returns, on the caller's goroutine, with ctx the call's.
//
//   - EventAllow: AllowN, Allow and AllowQuota; each item of AllowBatch,
//     AllowEach and TryWaitEach, and of package pipeline's Police.
//   - EventWait: each outcome of WaitN, Wait and WaitQuota, granted or
//     failed; each StartWait's, by the time its Ticket's Answer is read;
//     each item of package pipeline's Throttle, granted at once or in
//     line.
//   - EventRefund: each Refund.
//
// A call of one request refused before it reaches its partition
// (ErrInvalidCount, ErrKeyTooLong, ErrClosed) is observed with its error.
// A batch is observed for the items whose decisions or errors the call
// returns one by one: AllowEach's and TryWaitEach's items refused with
// ErrInvalidCount or ErrKeyTooLong are, each with its error; not the
// items it passes by (with an error already), nor those of a partition
// that had not answered when ctx ended or the router closed, nor any of
// an AllowBatch that a bad item fails whole. Never observed: Peek,
// PeekQuota, Reset, a request whose ctx ended before its answer (a WaitN
// that left its line included), a Ticket that Leave took out of its line
// before it was answered.
type Event struct {
	Kind     EventKind
	Key      string
	N        int
	Decision Decision      // what the call returned with (zero if none, and for EventRefund)
	Err      error         // the call's error, if any
	Waited   time.Duration // EventWait: from the call to its outcome, on Config.Clock
}

// EventKind is what an Event's call asked.
type EventKind uint8

const (
	EventAllow  EventKind = iota + 1 // a decision now
	EventWait                        // a wait for a grant
	EventRefund                      // units given back
)

// String returns the kind's name: "allow", "wait" or "refund".
func (k EventKind) String() string {
	switch k {
	case EventAllow:
		return "allow"
	case EventWait:
		return "wait"
	case EventRefund:
		return "refund"
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// observed tells Config.Observe of e, unless e's caller left before its
// answer (its error is ctx's): the caller of observed has checked that
// Observe is set. A panic in Observe is recovered and counted.
func (r *Router) observed(ctx context.Context, e Event) {
	if e.Err != nil && e.Err == ctx.Err() {
		return
	}
	defer func() {
		if recover() != nil {
			r.observePanics.Add(1)
		}
	}()
	r.observe(ctx, e)
}

// since returns the time on Config.Clock from start, a reading of it, to
// now: 0 if either reading failed.
func (r *Router) since(start time.Time) time.Duration {
	end := r.now()
	if start.IsZero() || end.IsZero() {
		return 0
	}
	return max(end.Sub(start), 0)
}

// now returns a reading of Config.Clock, or the zero Time if the clock
// panics or ends its goroutine (runtime.Goexit), which the partitions'
// supervision counts where they meet it. A clock of package clock is read
// on the caller's goroutine; any other on a goroutine of its own, since
// no recover stops a Goexit and a caller's goroutine must not end.
func (r *Router) now() (t time.Time) {
	if _, fake := r.clock.(*clock.Fake); fake || r.clock == clock.Real() {
		return r.clock.Now()
	}
	done := make(chan struct{})
	go func() {
		defer close(done) // also when the clock ends this goroutine
		_ = supervise.Call(ErrClockPanic, func() { t = r.clock.Now() })
	}()
	<-done
	return t
}
