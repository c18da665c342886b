package storeloop

import (
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/storetable"
)

// Work for the store that is no caller's request: what the lines need of
// it (their heads' decisions), the grants given back, and the quota a
// granted request asks for (its key's wait for one more unit) are chores,
// gathered while the loop serves and sent at the end of its turn (flush)
// as trips, which land as the callers' do.

// chore is one: its item, decided at at, and what to do with the answer.
type chore struct {
	at   time.Duration
	item storetable.Item

	ask *line  // the line whose head this asks, if it does
	no  uint64 // which of its asks this is

	// A grant whose answer waits for its key's quota (the item is a peek
	// of one more unit than it left): the request, or the waiter, and its
	// decision; or a try whose answer waits for its give-backs (the last),
	// and its items as decided, whose grants go back if its caller left;
	// or a request whose error waits for its give-backs (the last), and
	// the error (answerAfter).
	req   actor.Message
	items []storetable.Item
	w     *waiter
	d     algorithms.Decision
	err   error
	by    storetable.From
	grant uint64 // with by: the store's name of the state the grant was taken from
}

// answerAfter answers req with the error err once the give-backs to the
// store gathered since mark (the length of l.chores before them) have
// landed, so that what its caller asks next finds them made; at once if
// there are none. Unless its caller gave up: what it was granted went
// back either way.
func (l *loop) answerAfter(mark int, req *actor.Message, err error) {
	if len(l.chores) == mark {
		req.Answer(algorithms.Decision{}, err)
		return
	}
	last := &l.chores[len(l.chores)-1] // a give-back: refund appends nothing else
	last.req, last.err = *req, err
}

// flush asks the heads of the lines due, serves the requests unparked,
// and, while there is room for a trip, sends the chores, in trips of one
// instant each, and the requests gathered while there was none, taking
// turns when both wait, so that neither holds the other up under load;
// what is left waits for a trip to land (the loop flushes after each). It
// reports whether it did anything, or left anything to send.
func (l *loop) flush() (worked bool) {
	for {
		gathered := len(l.trips.gathered) > 0
		switch {
		case l.lines.dueBy(l.state.Now):
			l.serveDue(l.state.Now) // their heads, as chores
		case len(l.unparked) > 0:
			run := l.unparked
			l.unparked = nil
			l.serveRun(run, l.state.Now, nil)
		case len(l.chores) == 0 && !gathered:
			return worked
		case !l.trips.room():
			return true // no room: sent when a trip lands
		case len(l.chores) > 0 && !(gathered && l.trips.gatheredNext):
			l.trips.gatheredNext = true
			l.send(l.choresOf(l.chores[0].at))
		default:
			l.trips.gatheredNext = false
			l.serveRun(l.trips.takeGathered(), l.state.Now, nil)
		}
		worked = true
	}
}

// choresOf takes the chores of the instant at, in their order, into a
// trip.
func (l *loop) choresOf(at time.Duration) *trip {
	tr := l.trips.get()
	tr.now = at
	rest := l.chores[:0]
	for _, c := range l.chores {
		if c.at != at {
			rest = append(rest, c)
			continue
		}
		tr.chores = append(tr.chores, c)
		tr.items = append(tr.items, c.item)
	}
	clear(l.chores[len(rest):])
	l.chores = rest
	return tr
}

// landChores serves the answers to tr's chores, whose items follow those
// of its requests from first on.
func (l *loop) landChores(tr *trip, first int) {
	for k := range tr.chores {
		l.left.choreAt = k + 1 // first: if this one ends the goroutine, takeOver answers the rest
		l.heard(&tr.chores[k], &tr.items[first+k])
	}
	l.left.choreAt = 0
}

// heard serves the answer it to c, decided at c.at. A give-back's answer
// is nothing to deliver; its failure is counted (Table.Finish).
func (l *loop) heard(c *chore, it *storetable.Item) {
	switch {
	case c.ask != nil:
		l.heardHead(c, it)
	case c.item.Kind == storetable.Peek: // a grant's quota
		more := time.Duration(0)
		if it.Err == nil && !it.D.Allowed {
			more = it.D.RetryAfter
		}
		if w := c.w; w != nil {
			if l.quotaWaiterLeft(w) {
				l.refund(c.item.Key, c.at, w.msg.N(), c.by, c.grant)
				return
			}
			l.fillQuota(c.item.Key, c.at, &c.d, w.msg.Quota(), more)
			l.deliverWaiter(w, c.d, nil)
			return
		}
		l.inFlight(&c.req)
		l.inflight.by, l.inflight.grant = c.by, c.grant
		l.fillQuota(c.req.Key(), c.at, &c.d, c.req.Quota(), more)
		l.deliver(&c.req, c.at, c.d, nil)
		l.outOfFlight()
	case c.err != nil: // an error that waited for its give-backs
		c.req.Answer(algorithms.Decision{}, c.err)
	case c.req.Kind() == actor.KindTry: // a try whose answer waited for its give-backs
		l.inFlight(&c.req)
		l.inflight.items, l.inflight.refund = c.items, len(c.items)
		l.deliver(&c.req, c.at, algorithms.Decision{}, nil)
		l.outOfFlight()
	}
}
