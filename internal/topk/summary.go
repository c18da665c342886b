// Package topk counts the keys a partition denies in a bounded summary
// (Space-Saving, Metwally, Agrawal and El Abbadi, 2005): at most Size
// keys, each with a count that may overestimate its true count by at
// most its Err, whatever the number of keys counted. A partition keeps
// two of them, the current minute's and the one before (Denials), on its
// own goroutine: no lock, no goroutine, no timer.
package topk

import (
	"strings"
)

// Size is the most keys a Summary holds.
const Size = 64

// entry is one key a Summary holds.
type entry struct {
	key   string
	count uint64 // at least the key's true count since it came in, plus err
	err   uint64 // the most count may overestimate by
}

// Summary is a Space-Saving summary of at most Size keys. Every key
// whose true count is more than the total over Size is in it; a key in
// it has Count-Err <= its true count <= Count; a key not in it has a
// true count of at most Floor. The zero Summary is empty and ready.
type Summary struct {
	heap  []entry        // a min-heap by count: heap[0] is the least
	index map[string]int // each key's place in heap
	total uint64         // the counts added
}

// Add counts one more for key. A key it does not hold yet takes the
// place of the key with the least count once it is full, with that count
// (plus one) and that count as its Err. key is copied, so the summary
// never keeps a caller's buffer.
func (s *Summary) Add(key string) {
	s.total++
	if i, ok := s.index[key]; ok {
		s.heap[i].count++
		s.down(i)
		return
	}
	if s.index == nil {
		s.index = make(map[string]int, Size)
	}
	if len(s.heap) < Size {
		s.heap = append(s.heap, entry{key: strings.Clone(key), count: 1})
		i := len(s.heap) - 1
		s.index[s.heap[i].key] = i
		s.up(i)
		return
	}
	least := &s.heap[0]
	delete(s.index, least.key)
	*least = entry{key: strings.Clone(key), count: least.count + 1, err: least.count}
	s.index[least.key] = 0
	s.down(0)
}

// Floor returns the most a key the summary does not hold may have been
// counted: the least count it holds when it is full, else 0.
func (s *Summary) Floor() uint64 {
	if len(s.heap) < Size {
		return 0
	}
	return s.heap[0].count
}

// Total returns the counts added since the summary was last emptied.
func (s *Summary) Total() uint64 { return s.total }

// Lookup returns key's count and Err, and whether the summary holds it.
func (s *Summary) Lookup(key string) (count, err uint64, ok bool) {
	i, ok := s.index[key]
	if !ok {
		return 0, 0, false
	}
	return s.heap[i].count, s.heap[i].err, true
}

// Each calls f with each key held, its count and its Err, in no order.
func (s *Summary) Each(f func(key string, count, err uint64)) {
	for i := range s.heap {
		f(s.heap[i].key, s.heap[i].count, s.heap[i].err)
	}
}

// Empty forgets every key, keeping the room it had.
func (s *Summary) Empty() {
	clear(s.heap)
	s.heap = s.heap[:0]
	clear(s.index)
	s.total = 0
}

func (s *Summary) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if s.heap[p].count <= s.heap[i].count {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *Summary) down(i int) {
	for {
		least := i
		for c := 2*i + 1; c <= 2*i+2 && c < len(s.heap); c++ {
			if s.heap[c].count < s.heap[least].count {
				least = c
			}
		}
		if least == i {
			return
		}
		s.swap(i, least)
		i = least
	}
}

func (s *Summary) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.index[s.heap[i].key] = i
	s.index[s.heap[j].key] = j
}
