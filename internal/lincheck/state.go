package lincheck

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// state is a key's, as the specification has it. A state is never
// changed once made (next copies it): the checker keeps them.
type state struct {
	now   time.Duration // the fake clock's reading
	ss    []saved       // each policy's state
	ts    time.Duration // Store: the latest time a write decided the key at; -1: none
	gen   int           // Resets so far
	hold  time.Duration // the end of the key's hold; held at an instant before it (0: never held, or let go)
	from  time.Duration // in memory: the instant the line's head is asked from
	waits []wait        // in memory: WaitN calls that joined, oldest first; granted ones until Done
	never []int         // in memory: WaitN calls, cancelled, that never joined
	held  []held        // Store: grants of callers who left, until given back
	left  []int         // Store: callers who left, decided (or not), whose GiveBack is to come
	id    string        // the state, written out: equal states have equal ids
	hash  uint64        // id's
}

type wait struct {
	id, n   int
	granted bool
	d       algorithms.Decision

	// What its call returned, known from the history: Done must find it,
	// so a grant that differs, or any grant of a call that left, is a
	// dead end at once (which spares the checker the search of every
	// order of the calls until its Done).
	want algorithms.Decision
	left bool
}

type held struct {
	id, n, gen int
	own        time.Duration // the request's own time, which its give-back is sent with
}

func (m *Model) init() *state {
	s := &state{ss: make([]saved, len(m.rules)), ts: -1}
	s.seal()
	return s
}

// next returns a copy of s to change.
func (s *state) next() *state {
	c := *s
	c.ss = slices.Clone(s.ss)
	c.waits = slices.Clone(s.waits)
	c.never = slices.Clone(s.never)
	c.held = slices.Clone(s.held)
	c.left = slices.Clone(s.left)
	c.id, c.hash = "", 0
	return &c
}

// seal writes s's id and its hash, once it is made: the search compares
// and hashes states by the million, so the id is bytes, not text.
func (s *state) seal() *state {
	if s.hold != 0 && s.hold <= s.ts {
		// Through a Store, a hold the key's time has reached is over for
		// good: every request after it is decided at that time or later,
		// and a Hold that would not move the end past it changes nothing
		// either way. Let go, so that states that differ only in a hold
		// long over are one (in memory, ts is -1: dropEndedHold does it).
		s.hold = 0
	}
	b := make([]byte, 0, 64)
	b = binary.AppendVarint(b, int64(s.now))
	b = binary.AppendVarint(b, int64(s.ts))
	b = binary.AppendVarint(b, int64(s.gen))
	b = binary.AppendVarint(b, int64(s.from))
	b = binary.AppendVarint(b, int64(s.hold))
	for _, st := range s.ss {
		b = binary.AppendVarint(b, int64(st.at))
		b = binary.AppendUvarint(b, uint64(len(st.bytes)))
		b = append(b, st.bytes...)
	}
	b = binary.AppendUvarint(b, uint64(len(s.waits)))
	for _, w := range s.waits {
		// want and left are the call's own, known from its id.
		b = binary.AppendVarint(b, int64(w.id))
		b = binary.AppendVarint(b, int64(w.n))
		if w.granted {
			b = appendDecision(append(b, 1), w.d)
		} else {
			b = append(b, 0)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(s.never)))
	for _, id := range s.never {
		b = binary.AppendVarint(b, int64(id))
	}
	b = binary.AppendUvarint(b, uint64(len(s.held)))
	for _, h := range s.held {
		b = binary.AppendVarint(b, int64(h.id))
		b = binary.AppendVarint(b, int64(h.n))
		b = binary.AppendVarint(b, int64(h.gen))
		b = binary.AppendVarint(b, int64(h.own))
	}
	b = binary.AppendUvarint(b, uint64(len(s.left)))
	for _, id := range s.left {
		b = binary.AppendVarint(b, int64(id))
	}
	s.id = string(b)
	h := fnv.New64a()
	h.Write(b)
	s.hash = h.Sum64()
	return s
}

// heldAt returns the end of s's key's hold, and whether it is held at at:
// its end is after at.
func (s *state) heldAt(at time.Duration) (time.Duration, bool) { return s.hold, s.hold > at }

// dropEndedHold lets go a hold that has ended by s.now and that no turn
// of s's line is still to be asked from before its end (see asks), so
// that states that differ only in a hold long over are one.
func (s *state) dropEndedHold() {
	if s.hold != 0 && s.hold <= s.now && (s.head() < 0 || s.from >= s.hold) {
		s.hold = 0
	}
}

func appendDecision(b []byte, d algorithms.Decision) []byte {
	var flags byte
	if d.Allowed {
		flags |= 1
	}
	if d.WouldDeny {
		flags |= 2
	}
	b = append(b, flags)
	for _, v := range []int64{int64(d.Limit), int64(d.Remaining), int64(d.RetryAfter), int64(d.ResetAfter), int64(d.Delay)} {
		b = binary.AppendVarint(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(d.Policy)))
	return append(b, d.Policy...)
}

// String writes s out, as the story tells it.
func (s *state) String() string {
	var b strings.Builder
	if s.now != 0 {
		fmt.Fprintf(&b, "clock %v; ", s.now)
	}
	if s.ts >= 0 {
		fmt.Fprintf(&b, "written at %v; ", s.ts)
	}
	fmt.Fprintf(&b, "Resets %d; ", s.gen)
	if s.hold != 0 {
		fmt.Fprintf(&b, "held until %v; ", s.hold)
	}
	b.WriteString("policies:")
	for _, st := range s.ss {
		if st.bytes == "" {
			b.WriteString(" untouched")
		} else {
			fmt.Fprintf(&b, " [%x at %v]", st.bytes, st.at)
		}
	}
	if len(s.waits) > 0 {
		fmt.Fprintf(&b, "; line from %v:", s.from)
		for _, w := range s.waits {
			fmt.Fprintf(&b, " #%d(%d", w.id, w.n)
			if w.granted {
				b.WriteString(" granted")
			}
			b.WriteString(")")
		}
	}
	if len(s.never) > 0 {
		fmt.Fprintf(&b, "; never joined %v", s.never)
	}
	for _, h := range s.held {
		fmt.Fprintf(&b, "; #%d holds %d (sent at %v, after %d Resets)", h.id, h.n, h.own, h.gen)
	}
	if len(s.left) > 0 {
		fmt.Fprintf(&b, "; give-backs to come %v", s.left)
	}
	return b.String()
}
