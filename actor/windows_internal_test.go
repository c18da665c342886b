package actor

import (
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// windows is a Table of fixed windows of 2 units a second a key, for the
// tests of this package, which cannot import a router's tables (package
// keytable imports this one). It keeps a key from its first grant until
// its window is over.
type windows struct{ keys map[string]*window }

type window struct {
	start time.Duration // the window's
	used  int
}

const (
	windowLimit = 2
	windowSpan  = time.Second
)

func newWindows() *windows { return &windows{keys: map[string]*window{}} }

// at returns key's window at now, and the start of that window.
func (w *windows) at(key string, now time.Duration) (used int, start time.Duration) {
	start = now - now%windowSpan
	if k := w.keys[key]; k != nil && k.start == start {
		return k.used, start
	}
	return 0, start
}

func (w *windows) PeekN(key string, now time.Duration, n int, d *algorithms.Decision) error {
	*d = algorithms.Decision{}
	if n > windowLimit {
		return ErrExceedsCapacity
	}
	used, start := w.at(key, now)
	*d = algorithms.Decision{Allowed: used+n <= windowLimit, Limit: windowLimit, Remaining: windowLimit - used}
	if d.Allowed {
		d.Remaining -= n
	} else {
		d.RetryAfter = start + windowSpan - now
	}
	if used > 0 || d.Allowed {
		d.ResetAfter = start + windowSpan - now // untouched once its window is over
	}
	return nil
}

func (w *windows) AllowN(key string, now time.Duration, n int, d *algorithms.Decision) error {
	if err := w.PeekN(key, now, n, d); err != nil || !d.Allowed {
		return err
	}
	used, start := w.at(key, now)
	w.keys[key] = &window{start: start, used: used + n}
	return nil
}

func (w *windows) Refund(key string, now time.Duration, n int) error {
	if k := w.keys[key]; k != nil {
		k.used = max(k.used-n, 0)
	}
	return nil
}

func (w *windows) Reset(key string) { delete(w.keys, key) }

func (w *windows) Expire(now time.Duration, budget int) (dropped int) {
	for key, k := range w.keys {
		if dropped == budget {
			break
		}
		if k.start+windowSpan <= now {
			delete(w.keys, key)
			dropped++
		}
	}
	return dropped
}

// Len returns the number of keys held, as a router's tables tell it.
func (w *windows) Len() int { return len(w.keys) }

// It is a Table and nothing more: the partition does without the
// optional interfaces (a line's wait is its head's, for one).
var _ Table = (*windows)(nil)
