package keytable

import (
	"container/heap"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
)

// Holding keys (actor.Holder): a key held is granted nothing until its
// hold ends. The holds live in Keys, apart from the keys' states: a
// hold is not a state of any policy, it outlives a key's state being let go
// as idle (an untouched state is as good as none), and it goes with the key
// from one table to another when its policies change. A table never
// evicts a key held (it is pinned, as a key with waiters is), and the
// holds are bounded as the keys are: at most Limit.Max of them.
//
// Each decision on a key held is a denial that takes nothing; what it
// tells (RetryAfter) is the hold's end, and then what the key's policies
// would ask at that instant, so the same request made then is allowed
// unless something else happened to the key meanwhile.

// holds are the keys held and when each hold ends, with a heap of their
// ends, earliest first, so that ended holds are let go in order, a few
// at a time (Keys.Expire). An entry of the heap may be stale, its hold
// since made longer or ended by Reset: it is caught up with, or let go,
// when it comes to the top.
type holds struct {
	end  map[string]time.Duration
	ends holdEnds
}

type holdEnd struct {
	at  time.Duration
	key string
}

type holdEnds []holdEnd

func (h holdEnds) Len() int           { return len(h) }
func (h holdEnds) Less(i, j int) bool { return h[i].at < h[j].at }
func (h holdEnds) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *holdEnds) Push(x any)        { *h = append(*h, x.(holdEnd)) }
func (h *holdEnds) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = holdEnd{}
	*h = old[:len(old)-1]
	return e
}

// until returns the end of key's hold, if it is held at now.
func (h *holds) until(key string, now time.Duration) (time.Duration, bool) {
	if len(h.end) == 0 { // the common case: one length read
		return 0, false
	}
	end, ok := h.end[key]
	return end, ok && end > now
}

// has reports whether key is held, or was and has not been let go yet:
// a table never evicts such a key.
func (h *holds) has(key string) bool {
	if h == nil || len(h.end) == 0 {
		return false
	}
	_, ok := h.end[key]
	return ok
}

// expire lets go the holds ended at now, at most budget of them, and
// returns how many steps that took.
func (h *holds) expire(now time.Duration, budget int) (steps int) {
	for ; steps < budget && len(h.ends) > 0 && h.ends[0].at <= now; steps++ {
		top := &h.ends[0]
		end, ok := h.end[top.key]
		switch {
		case !ok: // reset
			heap.Pop(&h.ends)
		case end > now: // made longer since
			top.at = end
			heap.Fix(&h.ends, 0)
		default:
			delete(h.end, top.key)
			heap.Pop(&h.ends)
		}
	}
	return steps
}

// set holds key until end. The heap of ends is made again from the map
// when stale entries (of holds Reset) are most of it, so that holding
// and resetting a key again and again grows nothing.
func (h *holds) set(key string, end time.Duration) {
	if _, ok := h.end[key]; !ok {
		if h.end == nil {
			h.end = make(map[string]time.Duration)
		}
		if len(h.ends) > 2*len(h.end)+16 {
			h.rebuild()
		}
		heap.Push(&h.ends, holdEnd{end, key})
	}
	h.end[key] = end
}

// rebuild makes the heap of ends again, one entry for each key held.
func (h *holds) rebuild() {
	clear(h.ends)
	h.ends = h.ends[:0]
	for key, end := range h.end {
		h.ends = append(h.ends, holdEnd{end, key})
	}
	heap.Init(&h.ends)
}

// drop ends key's hold.
func (h *holds) drop(key string) {
	if len(h.end) > 0 {
		delete(h.end, key)
	}
}

// clear ends every hold.
func (h *holds) clear() {
	clear(h.end)
	clear(h.ends)
	h.ends = h.ends[:0]
}

var _ actor.Holder = (*Keys)(nil)

// Hold holds key until end (actor.Holder). A key new to the partition
// (neither held nor in its table) is refused as AllowN would refuse it
// if the table has no room for it, and so is one past Limit.Max keys
// held: the keys held without a state are bounded as the keys are.
func (k *Keys) Hold(key string, now, end time.Duration) error {
	if was, ok := k.held.until(key, now); ok {
		if end > was {
			k.held.set(key, end)
		}
		return nil
	}
	t := k.ask(key)
	if t.slotOf(key) == none {
		k.held.expire(now, len(k.held.ends)) // the ended, first: they make room
		err := t.admits(key, now)
		if err == nil && k.limit.Max > 0 && len(k.held.end) >= k.limit.Max {
			err = errNoRoom
		}
		if err != nil {
			k.asking = nil
			return err
		}
	}
	k.asking = nil
	k.held.set(key, end)
	return nil
}

// denyHeld writes into d the denial of n units on key at now, held until
// end: the wait is until end, and then what the key's policies would ask
// at end. Its errors are those of a PeekN at end.
// (asking is cleared by hand, not deferred: a rule that ends the
// goroutine must find it set, for Abandoned.)
func (k *Keys) denyHeld(key string, now, end time.Duration, n int, d *algorithms.Decision) error {
	t := k.ask(key)
	err := t.PeekN(key, end, n, d)
	var idle time.Duration
	if err == nil {
		idle, err = t.untilIdle(key, now)
	}
	k.asking = nil
	if err != nil {
		*d = algorithms.Decision{}
		return err
	}
	wait := end - now
	if !d.Allowed {
		wait = after(wait, d.RetryAfter)
	}
	*d = algorithms.Decision{RetryAfter: wait, ResetAfter: max(end-now, idle)}
	return nil
}

// denyHeldItems denies the items of a batch on keys held at now, each as
// AllowN would, and marks them Skip for the tables to pass by; it
// returns the items it marked, for AllowEach to unmark.
func (k *Keys) denyHeldItems(items []Item, now time.Duration) []int {
	marked := k.marked[:0]
	for i := range items {
		it := &items[i]
		if it.Skip {
			continue
		}
		if end, ok := k.held.until(it.Key, now); ok {
			it.Err = k.denyHeld(it.Key, now, end, it.N, &it.D)
			it.Skip = true
			marked = append(marked, i)
		}
	}
	k.marked = marked
	return marked
}

// admits returns the error AllowN would return for key if it is new and
// the table has no room for it.
func (t *table[S]) admits(key string, now time.Duration) (err error) {
	if _, ok := t.lookup(key); ok {
		return nil
	}
	switch {
	case !t.fits(len(key)):
		return errKeysFull
	case !t.hasRoom(now):
		return errNoRoom
	}
	return nil
}

// untilIdle returns the time until key's state is untouched under its
// enforced policies, as a Decision tells it: 0 if the table does not hold it.
func (t *table[S]) untilIdle(key string, now time.Duration) (wait time.Duration, err error) {
	i, ok := t.lookup(key)
	if !ok {
		return 0, nil
	}
	err = t.ask(i, func() { wait = t.enforcedResetAfter(i, now) })
	return max(wait, 0), err
}
