package topk

import "time"

// Generation is how long a generation of Denials counts, on the
// partition's timeline.
const Generation = time.Minute

// Denials is what one partition counts of the keys it denied over the
// last minute: two Summaries, the current generation's and the one
// before, each Generation long, so that the two together span at least
// the last Generation and at most the last two. Only the partition's
// goroutine touches it.
type Denials struct {
	cur, prev Summary
	start     time.Duration // when cur began, on the partition's timeline
}

// Tick moves the generations on to now, a reading of the partition's
// timeline: once cur is a Generation old it becomes prev, and once prev
// is too, both are emptied.
func (d *Denials) Tick(now time.Duration) {
	age := now - d.start
	if age < Generation {
		return // the common case, each burst
	}
	if age >= 2*Generation {
		d.prev.Empty()
		d.cur.Empty()
	} else {
		d.prev, d.cur = d.cur, d.prev
		d.cur.Empty()
	}
	d.start = now - age%Generation
}

// Add counts a denial of key in the current generation.
func (d *Denials) Add(key string) { d.cur.Add(key) }

// Each calls f with each key either generation holds, its count over
// both, and how much that count may overestimate by (err): a key one
// generation does not hold counts that generation's Floor, the most it
// may have had there, in count and in err, so that count-err <= its true
// count over both <= count. Each key is a string of its own.
func (d *Denials) Each(f func(key string, count, err uint64)) {
	curFloor, prevFloor := d.cur.Floor(), d.prev.Floor()
	d.cur.Each(func(b []byte, count, err uint64) {
		key := string(b)
		if c, e, ok := d.prev.Lookup(key); ok {
			f(key, count+c, err+e)
			return
		}
		f(key, count+prevFloor, err+prevFloor)
	})
	d.prev.Each(func(b []byte, count, err uint64) {
		if _, _, ok := d.cur.Lookup(string(b)); !ok {
			f(string(b), count+curFloor, err+curFloor)
		}
	})
}
