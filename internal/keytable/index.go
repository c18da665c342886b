package keytable

// A table finds a key's slot through its index: open addressing with
// linear probing over one slice of 32-bit words, each 0 (empty) or an
// entry: the key's slot number + 1 in the low bits, as many as index a
// bucket, and above them the key's 32-bit hash's own bits from there up.
// A key's home bucket is its hash's low bits, so an entry and its home
// together hold the whole hash. It takes 4 bytes a bucket at a load of at
// most 3/4, about a sixth of what a map[string]uint32 takes per key; a
// hit compares the key only when the high bits match (all but one in 2^12
// of the others, at a million buckets). Deleting shifts back the entries
// after the hole, so the index never fills with tombstones. Neither the
// index nor a slot keeps a key's whole hash: deleting, moving and growing
// hash the key's bytes again.

import "hash/maphash"

const minBuckets = 8

// entry packs a key's hash, h, and its slot, for buckets of mask + 1.
func entry(h, slot, mask uint32) uint32 { return h&^mask | (slot + 1) }

// entrySlot returns the slot of entry e, for buckets of mask + 1.
func entrySlot(e, mask uint32) uint32 { return e&mask - 1 }

// seed is the process's: every table, and every router choosing a
// partition, hashes a key the same way (Hash).
var seed = maphash.MakeSeed()

// Hash returns key's hash as every table computes it. A router picks the
// key's partition with it (Share), and hands it to the table with a
// batch's items (Item.Hash): one hash of the key's bytes serves both.
func Hash(key string) uint64 { return maphash.String(seed, key) }

// Share returns which of n tables holds the key whose hash is h: its
// high bits pick it, since a table finds a key's slot with the low ones
// (hash), and a key's table and its slot in it must not go together.
func Share(h uint64, n int) int { return int((h >> 32) * uint64(n) >> 32) }

func (t *table[S]) hash(key string) uint32 { return uint32(Hash(key)) }

// lookup returns the slot that holds key.
func (t *table[S]) lookup(key string) (uint32, bool) { return t.lookupHash(key, t.hash(key)) }

// lookupItem returns the slot that holds its key, with the hash the item
// carries, if any.
func (t *table[S]) lookupItem(it *Item) (uint32, bool) {
	h := uint32(it.Hash)
	if !it.Hashed {
		h = t.hash(it.Key)
	}
	return t.lookupHash(it.Key, h)
}

// lookupHash returns the slot that holds key, whose hash is h.
func (t *table[S]) lookupHash(key string, h uint32) (uint32, bool) {
	if t.held == 0 {
		return 0, false
	}
	_, slot, ok := t.probe(key, h)
	return slot, ok
}

// probe returns the bucket that holds key, whose hash is h, and its slot;
// or the empty bucket where it would go.
func (t *table[S]) probe(key string, h uint32) (b int, slot uint32, ok bool) {
	mask := uint32(len(t.buckets) - 1)
	for b = int(h & mask); ; b = int(uint32(b+1) & mask) {
		e := t.buckets[b]
		if e == 0 {
			return b, 0, false
		}
		if e&^mask == h&^mask {
			if s := entrySlot(e, mask); string(t.keyBytes(t.slots[s].key)) == key { // compared in place
				return b, s, true
			}
		}
	}
}

// place adds a key, not in the index, with hash h at slot.
func (t *table[S]) place(key string, h, slot uint32) {
	if (t.held+1)*4 > len(t.buckets)*3 {
		t.grow()
	}
	b, _, _ := t.probe(key, h)
	t.buckets[b] = entry(h, slot, uint32(len(t.buckets)-1))
	t.held++
}

// grow doubles the buckets and places every key held again, hashing its
// bytes again: the entries keep only part of their hashes. It reads the
// slots in order, and so the keys' bytes mostly in order too. It is called
// by place, when every slot is indexed but the last, the new key's. (The
// 4 GiB of a table's keys hold fewer than 2^31 keys, so the buckets never
// pass 2^32, the most a 32-bit entry can index.)
func (t *table[S]) grow() {
	t.buckets = make([]uint32, max(2*len(t.buckets), minBuckets))
	mask := uint32(len(t.buckets) - 1)
	for slot := range uint32(t.held) {
		h := t.slotHash(slot)
		b := h & mask
		for t.buckets[b] != 0 {
			b = (b + 1) & mask
		}
		t.buckets[b] = entry(h, slot, mask)
	}
}

// slotHash returns the hash of the key at slot, from its bytes.
func (t *table[S]) slotHash(slot uint32) uint32 {
	return uint32(maphash.Bytes(seed, t.keyBytes(t.slots[slot].key)))
}

// bucketOf returns the bucket of the key at slot. The entry, hash and
// slot together, is unique, so it is found without comparing keys.
func (t *table[S]) bucketOf(slot uint32) int {
	mask := uint32(len(t.buckets) - 1)
	h := t.slotHash(slot)
	want := entry(h, slot, mask)
	for b := h & mask; ; b = (b + 1) & mask {
		switch t.buckets[b] {
		case want:
			return int(b)
		case 0:
			panic("chanlimit: table index lost a key") // not reached: every slot is indexed
		}
	}
}

// unplace takes the key at slot out of the index, shifting back the
// entries after it that probed past its bucket.
func (t *table[S]) unplace(slot uint32) {
	mask := uint32(len(t.buckets) - 1)
	hole := uint32(t.bucketOf(slot))
	for b := (hole + 1) & mask; ; b = (b + 1) & mask {
		e := t.buckets[b]
		if e == 0 {
			break
		}
		// e may fill the hole if its home is not in (hole, b].
		if home := t.slotHash(entrySlot(e, mask)) & mask; (b-home)&mask >= (b-hole)&mask {
			t.buckets[hole] = e
			hole = b
		}
	}
	t.buckets[hole] = 0
	t.held--
}

// replace points the index at slot to for the key at slot from.
func (t *table[S]) replace(from, to uint32) {
	mask := uint32(len(t.buckets) - 1)
	b := t.bucketOf(from)
	t.buckets[b] = t.buckets[b]&^mask | (to + 1)
}
