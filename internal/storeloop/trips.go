package storeloop

import (
	"context"
	"sync"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/internal/storetable"
	"github.com/chanlimit/chanlimit/internal/supervise"
)

// A partition's round trips to its store, as one component: the trips
// out, the goroutines that make them (its workers), the trips kept to
// reuse, and the requests gathered while there is no room for another.
// The loop alone calls its methods; the workers touch only the trips
// handed to them, until they hand them back.

// MaxTrips is the most round trips a partition has out at once: enough
// that a request finds room at once while round trips take long (a Redis
// across a network), so that it waits one round trip, not the rest of
// another too. Where round trips are dear (a Redis whose CPU is the
// bound decides a call of many requests for much less than as many
// calls), the store is the one to keep them few, since it sees every
// partition's: redislimit's has a limit on those out that adapts to their
// time, and sends the calls that wait for room together, in one call
// (combine.go). Past MaxTrips out, a partition gathers requests for its
// next trip.
const MaxTrips = 8

// trip is a run of requests out to the store, or chores: their items
// follow the requests'.
type trip struct {
	run    []actor.Message
	sent   []int // for each request of run, its first item in items
	chores []chore
	items  []storetable.Item
	now    time.Duration
	out    *storetable.Trip // nil: nothing to send
	ctx    context.Context
	cancel context.CancelFunc // ctx's, once the trip is back
}

// trips is the round trips of a partition.
//
// A trip goes out on a goroutine that does nothing but wait for the store
// (a worker, started as trips first need them, up to max, and kept
// until the partition stops: a goroutine started per trip grew its stack
// through the client's calls on every trip), and comes back on landed.
type trips struct {
	out      int             // trips out
	max      int             // the most trips out at once: MaxTrips, but in tests
	work     chan *trip      // trips for the workers to make; room for max
	landed   chan *trip      // where trips come back; room for max
	workers  int             // workers started
	done     sync.WaitGroup  // the workers, until stop
	spare    []*trip         // trips to reuse
	gathered []actor.Message // requests for trips, taken while max were out: they go out together when one lands (flush)

	// gatheredNext is set once chores went out: if the gathered requests
	// wait too, they go next (flush takes turns).
	gatheredNext bool
}

// newTrips returns the round trips of a partition that has up to most out
// at once.
func newTrips(most int) trips {
	return trips{max: most, work: make(chan *trip, most), landed: make(chan *trip, most)}
}

// room reports whether another trip may go out.
func (ts *trips) room() bool { return ts.out < ts.max }

// gather keeps run, requests for a trip that has no room, to go out
// together when one lands.
func (ts *trips) gather(run []actor.Message) { ts.gathered = append(ts.gathered, run...) }

// gatherRoom returns how many more requests may be gathered: a mailbox's
// worth, size, in all. With none left, the loop leaves its mailbox unread
// until a trip lands, and callers wait to send, as for a full mailbox, so
// that what a partition holds stays bounded.
func (ts *trips) gatherRoom(size int) int {
	return max(size-len(ts.gathered), 0)
}

// takeGathered returns the requests gathered, which are no longer kept.
func (ts *trips) takeGathered() []actor.Message {
	run := ts.gathered
	ts.gathered = nil
	return run
}

// launch hands tr, prepared, to a worker, starting one if every worker is
// out. There is room (room).
func (ts *trips) launch(tr *trip) {
	ts.out++
	if ts.workers < ts.out {
		ts.workers++
		work, landed, done := ts.work, ts.landed, &ts.done
		ts.done.Go(func() { tripWorker(work, landed, done) })
	}
	ts.work <- tr // room: at most max are out
}

// back notes that tr, which went out, has landed.
func (ts *trips) back(tr *trip) {
	if tr.out != nil {
		ts.out--
	}
}

// tripWorker makes the trips sent on work, one at a time, sending each
// back on landed (room: at most max are out), until work is closed.
// A store that ends the goroutine (runtime.Goexit) could not answer: its
// trip lands failed, and another worker takes this one's place, counted
// in done.
func tripWorker(work <-chan *trip, landed chan<- *trip, done *sync.WaitGroup) {
	for tr := range work {
		exited := true
		func() {
			defer func() {
				if !exited {
					return
				}
				tr.out.Fail(supervise.Exited(storetable.ErrStoreUnavailable))
				tr.cancel()
				landed <- tr
				done.Go(func() { tripWorker(work, landed, done) }) // before this one is done: stop waits for both
			}()
			tr.out.Go(tr.ctx)
			exited = false
		}()
		tr.cancel()
		landed <- tr
	}
}

// stop lets the workers go, once every trip has landed, and waits for them
// to end.
func (ts *trips) stop() {
	if ts.work != nil {
		close(ts.work)
		ts.work = nil
		ts.done.Wait()
	}
}

// get returns a trip to fill, a spare one if there is one.
func (ts *trips) get() *trip {
	if k := len(ts.spare); k > 0 {
		tr := ts.spare[k-1]
		ts.spare = ts.spare[:k-1]
		return tr
	}
	return &trip{}
}

// put keeps tr for another run, without the references it held.
func (ts *trips) put(tr *trip) {
	clear(tr.run)
	clear(tr.items)
	clear(tr.chores)
	tr.run, tr.sent, tr.items, tr.chores = tr.run[:0], tr.sent[:0], tr.items[:0], tr.chores[:0]
	tr.out, tr.ctx, tr.cancel = nil, nil, nil
	if len(ts.spare) < ts.max {
		ts.spare = append(ts.spare, tr)
	}
}
