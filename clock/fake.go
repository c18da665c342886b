package clock

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// Fake is a Clock that moves only when told to. Advance and Set move it;
// timers fire, in deadline order, when the time they wait for is reached.
// Firing never blocks: each timer's channel has a buffer of one and a firing
// that finds it full is dropped, as a time.Timer's would be.
//
// The zero Fake is not ready for use; call NewFake. A Fake is safe for
// simultaneous use by many goroutines.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters waiterHeap
	seq     uint64        // orders timers with equal deadlines by when they were set
	changed chan struct{} // closed and replaced whenever the waiter count changes
}

var _ Clock = (*Fake)(nil)

// NewFake returns a Fake clock that reads start until it is moved.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Since returns Now().Sub(t).
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// Advance moves the clock forward by d and fires every timer whose deadline
// is reached, earliest first (equal deadlines in the order the timers were
// set), each with its own deadline as the time sent. A negative d steps the
// clock back, as a misbehaving wall clock might; nothing fires then.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.moveLocked(f.now.Add(d))
}

// Set moves the clock to t, forward or back, firing what became due as
// Advance does.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.moveLocked(t)
}

func (f *Fake) moveLocked(to time.Time) {
	fired := false
	for len(f.waiters) > 0 && !f.waiters[0].deadline.After(to) {
		w := heap.Pop(&f.waiters).(*fakeTimer)
		if w.deadline.After(f.now) {
			f.now = w.deadline
		}
		w.fire(w.deadline)
		fired = true
	}
	f.now = to
	if fired {
		f.notifyLocked()
	}
}

// Waiters returns the number of timers waiting to fire.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// BlockUntilContext returns nil once at least n timers are waiting to fire,
// or ctx.Err() if ctx is done first. Tests use it to wait until the code
// under test has set its timer before they Advance, instead of sleeping.
func (f *Fake) BlockUntilContext(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		have, changed := len(f.waiters), f.changed
		f.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// NewTimer returns a timer that fires once the clock has advanced by d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1), index: -1}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scheduleLocked(t, f.now.Add(d)) // at once if d <= 0
	return t
}

// scheduleLocked arms t to fire once the clock reads at, or fires it at
// once if it reads at already.
func (f *Fake) scheduleLocked(t *fakeTimer, at time.Time) {
	if !at.After(f.now) {
		t.fire(f.now)
		return
	}
	t.deadline = at
	t.seq = f.seq
	f.seq++
	heap.Push(&f.waiters, t)
	f.notifyLocked()
}

// unscheduleLocked disarms t and empties its channel. It reports whether t
// was pending: waiting to fire, or fired with its value still unread. Since
// Go 1.23 a time.Timer counts the latter as pending too, as if the value were
// sent only when read.
func (f *Fake) unscheduleLocked(t *fakeTimer) bool {
	unread := false
	select {
	case <-t.c:
		unread = true
	default:
	}
	if t.index < 0 {
		return unread
	}
	heap.Remove(&f.waiters, t.index)
	f.notifyLocked()
	return true
}

func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

type fakeTimer struct {
	f        *Fake
	c        chan time.Time
	deadline time.Time
	seq      uint64
	index    int // position in the heap; -1 when not waiting
}

var _ AtTimer = (*fakeTimer)(nil)

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.f.unscheduleLocked(t)
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.resetLocked(t.f.now.Add(d))
}

// ResetAt is Reset for the instant at: the timer fires once the clock
// reads at, at once if it does already.
func (t *fakeTimer) ResetAt(at time.Time) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.resetLocked(at)
}

// resetLocked disarms t and arms it again for at, and reports whether it
// was pending, as Stop does.
func (t *fakeTimer) resetLocked(at time.Time) bool {
	active := t.f.unscheduleLocked(t)
	t.f.scheduleLocked(t, at)
	return active
}

// fire delivers now without blocking; a full channel keeps its older value.
func (t *fakeTimer) fire(now time.Time) {
	select {
	case t.c <- now:
	default:
	}
}

// waiterHeap orders timers by deadline, then by when they were set.
type waiterHeap []*fakeTimer

func (h waiterHeap) Len() int { return len(h) }

func (h waiterHeap) Less(i, j int) bool {
	if h[i].deadline.Equal(h[j].deadline) {
		return h[i].seq < h[j].seq
	}
	return h[i].deadline.Before(h[j].deadline)
}

func (h waiterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *waiterHeap) Push(x any) {
	t := x.(*fakeTimer)
	t.index = len(*h)
	*h = append(*h, t)
}

func (h *waiterHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}
