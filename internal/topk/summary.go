// Package topk counts the keys a partition denies in a bounded summary
// (Space-Saving, Metwally, Agrawal and El Abbadi, 2005): at most Size
// keys, each with a count that may overestimate its true count by at
// most its Err, whatever the number of keys counted. A partition keeps
// two of them, the current minute's and the one before (Denials), on its
// own goroutine: no lock, no goroutine, no timer.
package topk

import "hash/maphash"

// Size is the most keys a Summary holds.
const Size = 64

// seed is the hash of the keys a Summary holds.
var seed = maphash.MakeSeed()

// entry is one key a Summary holds.
type entry struct {
	hash  uint64 // of key, to find it
	key   []byte // a copy, in a buffer the entry keeps for the next key it holds
	count uint64 // at least the key's true count since it came in, plus err
	err   uint64 // the most count may overestimate by
}

// slots is the size of a Summary's index: twice Size, so that it is at
// most half full and a key is found in a probe or two.
const slots = 2 * Size

// Summary is a Space-Saving summary of at most Size keys. Every key
// whose true count is more than the total over Size is in it; a key in
// it has Count-Err <= its true count <= Count; a key not in it has a
// true count of at most Floor. The zero Summary is empty and ready.
//
// Counting allocates nothing once each entry's buffer has room for the
// keys it holds, and takes a few steps whatever the keys: a key is found
// by its hash in an index of its own (open addressing, linear probing);
// a key held counts one more in place; a new key takes the place of an
// entry with the least count, which least finds among those it noted at
// its last look over the entries (counts only grow, so they keep the
// least until each has counted more), copying the key into that entry's
// buffer.
type Summary struct {
	entries [Size]entry
	n       int          // entries in use
	index   [slots]uint8 // by hash: an entry's number + 1, or 0 where none is
	low     uint64       // the least count at least's last look: no entry has less
	lows    [Size]uint8  // the entries that had the count low then (some may have more now)
	nlows   int
	total   uint64 // the counts added
}

// Add counts one more for key. A key it does not hold yet takes the
// place of a key with the least count once it is full, with that count
// (plus one) and that count as its Err. key is copied, so the summary
// never keeps a caller's buffer.
func (s *Summary) Add(key string) {
	s.total++
	h := maphash.String(seed, key)
	if e := s.find(h, key); e >= 0 {
		s.entries[e].count++
		return
	}
	var e int
	if s.n < Size {
		e = s.n
		s.n++
		s.entries[e].count, s.entries[e].err = 1, 0
	} else {
		e = s.least()
		s.unindex(e)
		s.entries[e].err = s.entries[e].count
		s.entries[e].count++
	}
	en := &s.entries[e]
	en.hash, en.key = h, append(en.key[:0], key...)
	s.reindex(e)
}

// least returns an entry with the least count, of a full summary.
func (s *Summary) least() int {
	for {
		for s.nlows > 0 {
			s.nlows--
			if e := int(s.lows[s.nlows]); s.entries[e].count == s.low {
				return e
			}
		}
		s.low = s.entries[0].count
		for e := range s.n {
			switch c := s.entries[e].count; {
			case c < s.low:
				s.low, s.nlows = c, 0
				fallthrough
			case c == s.low:
				s.lows[s.nlows] = uint8(e)
				s.nlows++
			}
		}
	}
}

// find returns the number of the entry holding key, whose hash is h, or
// -1.
func (s *Summary) find(h uint64, key string) int {
	for i := h % slots; s.index[i] != 0; i = (i + 1) % slots {
		if e := int(s.index[i]) - 1; s.entries[e].hash == h && string(s.entries[e].key) == key {
			return e
		}
	}
	return -1
}

// reindex puts entry e in the index, by its hash.
func (s *Summary) reindex(e int) {
	i := s.entries[e].hash % slots
	for s.index[i] != 0 {
		i = (i + 1) % slots
	}
	s.index[i] = uint8(e + 1)
}

// unindex takes entry e out of the index, moving back the entries after
// it in its run that it stood before (backward-shift deletion).
func (s *Summary) unindex(e int) {
	i := s.entries[e].hash % slots
	for int(s.index[i]) != e+1 {
		i = (i + 1) % slots
	}
	for j := (i + 1) % slots; s.index[j] != 0; j = (j + 1) % slots {
		home := s.entries[s.index[j]-1].hash % slots
		// The entry at j may move back to i if its home is not in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			s.index[i] = s.index[j]
			i = j
		}
	}
	s.index[i] = 0
}

// Floor returns the most a key the summary does not hold may have been
// counted: 0 until it is full, and then the least count of the keys it
// let go, when each went (at most the least count it holds).
func (s *Summary) Floor() uint64 {
	if s.n < Size {
		return 0
	}
	return s.low
}

// Total returns the counts added since the summary was last emptied.
func (s *Summary) Total() uint64 { return s.total }

// Lookup returns key's count and Err, and whether the summary holds it.
func (s *Summary) Lookup(key string) (count, err uint64, ok bool) {
	e := s.find(maphash.String(seed, key), key)
	if e < 0 {
		return 0, 0, false
	}
	return s.entries[e].count, s.entries[e].err, true
}

// Each calls f with each key held, its count and its Err, in no order.
// The key is the summary's own bytes, valid only during the call.
func (s *Summary) Each(f func(key []byte, count, err uint64)) {
	for e := range s.n {
		f(s.entries[e].key, s.entries[e].count, s.entries[e].err)
	}
}

// Empty forgets every key, keeping its entries' buffers.
func (s *Summary) Empty() {
	s.n, s.total, s.low, s.nlows = 0, 0, 0, 0
	clear(s.index[:])
}
