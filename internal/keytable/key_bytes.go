package keytable

import "encoding/binary"

// A table keeps the bytes of its keys end to end in one slice, keys, so
// that a new key costs no allocation of its own, and a slot names its key
// by a span of it. The bytes of dropped keys stay behind as garbage until
// keys is squeezed: when it fills up and half of it is garbage, or, to
// give the memory of a flood back, once few keys are left.

// span is where a key lies in a table's keys: its length as a uvarint
// (one byte, for a key shorter than 128 bytes), then its bytes. An offset
// of 32 bits keeps a slot small (and free of pointers, for a state without
// any, so the garbage collector never reads the slots); it caps a table's
// keys at 4 GiB (2 GiB where an int has 32 bits): keyRoom.
type span struct{ off uint32 }

// keySize returns the bytes a key of n bytes takes in keys.
func keySize(n int) int {
	size := n + 1
	for n >= 0x80 {
		n >>= 7
		size++
	}
	return size
}

// minShrink is the capacity of keys below which shrink leaves it be, and
// maxShrink the most bytes of keys it copies.
const (
	minShrink = 64 << 10
	maxShrink = 1 << 20
)

// keyBytes returns the bytes of the key at sp; they alias the table's.
func (t *table[S]) keyBytes(sp span) []byte {
	start, n := sp.off+1, uint64(t.keys[sp.off])
	if n >= 0x80 { // a long key: its length takes more than a byte
		var w int
		n, w = binary.Uvarint(t.keys[sp.off:])
		start = sp.off + uint32(w)
	}
	end := start + uint32(n)
	return t.keys[start:end:end]
}

// sizeAt returns the bytes the key at sp takes in keys, its length's
// included.
func (t *table[S]) sizeAt(sp span) int { return keySize(len(t.keyBytes(sp))) }

// fits reports whether room would find room for a key of n bytes,
// without squeezing.
func (t *table[S]) fits(n int) bool {
	n = keySize(n)
	live := len(t.keys) - t.garbage
	return n <= t.keyRoom-len(t.keys) || (n <= t.keyRoom-live && t.garbage >= len(t.keys)/4)
}

// room reports whether a key of n bytes fits under keyRoom. If it does
// not, it squeezes the garbage out first when that makes it fit and
// frees at least a quarter of keys, so that a table at the cap copies its
// keys once per quarter dropped, not for every new key. (Near 4 GiB that
// one copy is long, and needs the memory twice over while it lasts.)
func (t *table[S]) room(n int) bool {
	if keySize(n) <= t.keyRoom-len(t.keys) {
		return true
	}
	if !t.fits(n) {
		return false
	}
	t.squeeze(keySize(n))
	return true
}

// store copies key into keys, which room has said it fits, and returns
// where it lies. When keys is full and at least half of it is garbage, it
// squeezes the garbage out instead of growing, so that a byte dropped
// costs at most a byte copied.
func (t *table[S]) store(key string) span {
	size := keySize(len(key))
	if len(t.keys)+size > cap(t.keys) && t.garbage >= len(t.keys)-t.garbage {
		t.squeeze(size)
	}
	sp := span{uint32(len(t.keys))}
	t.keys = binary.AppendUvarint(t.keys, uint64(len(key)))
	t.keys = append(t.keys, key...)
	return sp
}

// emptyKeys empties keys once no key is held, and gives a flood's worth
// of it back.
func (t *table[S]) emptyKeys() {
	t.keys, t.garbage = t.keys[:0], 0
	if cap(t.keys) >= minShrink {
		t.keys = nil
	}
}

// shrink gives back the garbage of dropped keys once few keys are left:
// when three quarters of keys or more are garbage, and squeezing reads at
// most idleCountLimit slots and copies at most maxShrink bytes, so that it
// never stalls the partition for long. The garbage of a table with more
// keys waits until keys fills up (store).
func (t *table[S]) shrink() {
	live := len(t.keys) - t.garbage
	if cap(t.keys) >= minShrink && t.garbage/3 >= live && live <= maxShrink && len(t.slots) <= idleCountLimit {
		t.squeeze(0)
	}
}

// squeeze copies the keys held into a new slice, with room for extra bytes
// more and a quarter to grow (within keyRoom), and drops the garbage.
// live + extra never passes keyRoom.
func (t *table[S]) squeeze(extra int) {
	live := len(t.keys) - t.garbage
	size := live + extra
	keys := make([]byte, 0, size+min(live/4, t.keyRoom-size))
	for i := range t.slots {
		sp := &t.slots[i].key
		off := len(keys)
		keys = append(keys, t.keys[sp.off:int(sp.off)+t.sizeAt(*sp)]...)
		sp.off = uint32(off)
	}
	t.keys, t.garbage = keys, 0
}
