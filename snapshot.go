package chanlimit

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/internal/keytable"
	"github.com/chanlimit/chanlimit/internal/supervise"
	"github.com/chanlimit/chanlimit/internal/wire"
)

// params are what a snapshot must have been taken under to be restored:
// the algorithm's name, Limit, Window, and the capacity Burst gave it.
type params struct {
	algorithm string
	limit     int
	window    time.Duration
	capacity  int
}

// The snapshot format. Integers are varints (encoding/binary), strings a
// uvarint length and the bytes.
//
//	magic     "chanlimit snapshot\n"
//	version   uvarint: 2 (1 is read too)
//	params    algorithm string, Limit uvarint, Window uvarint, capacity uvarint
//	sections  uvarint, then each, a partition's:
//	          taken: the clock's reading, Unix seconds varint and
//	                 nanoseconds uvarint (version 1: Unix ns varint,
//	                 which holds only the years 1678 to 2262)
//	          keys uvarint, size uvarint, then size bytes of entries
//	          (keytable.NextEntry)
//	checksum  CRC-32C of all of the above, 4 bytes big-endian
const (
	snapshotMagic   = "chanlimit snapshot\n"
	snapshotVersion = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot writes the state of every key that is not idle to w, partition
// by partition: each partition answers with its keys as they stand between
// two of its requests, in the mailbox's order, and goes on. Restore reads
// it back. Each partition's part records the clock's reading, so the time
// that passes before the restore counts, as it would have had the router
// kept running. Snapshot returns ctx.Err() if ctx is done before every
// partition has answered, ErrClosed if the router closes, ErrClockPanic,
// w's error, and an error wrapping errors.ErrUnsupported if the algorithm
// cannot save its states; what it wrote to w then is not a snapshot.
func (r *Router) Snapshot(ctx context.Context, w io.Writer) error {
	sum := crc32.New(castagnoli)
	out := io.MultiWriter(w, sum)
	head := r.params.appendTo([]byte(snapshotMagic))
	head = binary.AppendUvarint(head, uint64(len(r.parts)))
	var entries, section []byte
	for i, p := range r.parts {
		var (
			keys int
			wall time.Time
		)
		err := p.Do(ctx, func(s *actor.State) (err error) {
			// The stamp must not be before the states' instant, or a
			// restore would count time that did not pass: the later of
			// the time of day, read after now, and the time the partition
			// counted since Start, whatever the clock's time of day did.
			if wall, err = s.ReadClock(); err != nil {
				return err
			}
			wall = later(wall, s.Wall)
			entries, keys, err = s.Table.AppendSnapshot(entries[:0], s.Now)
			return err
		})
		if err != nil {
			return fmt.Errorf("chanlimit: Snapshot: %w", err)
		}
		section = binary.AppendVarint(section[:0], wall.Unix())
		section = binary.AppendUvarint(section, uint64(wall.Nanosecond()))
		section = binary.AppendUvarint(section, uint64(keys))
		section = binary.AppendUvarint(section, uint64(len(entries)))
		if i == 0 {
			section = append(head, section...)
		}
		if _, err := out.Write(section); err != nil {
			return fmt.Errorf("chanlimit: Snapshot: %w", err)
		}
		if _, err := out.Write(entries); err != nil {
			return fmt.Errorf("chanlimit: Snapshot: %w", err)
		}
	}
	if _, err := w.Write(sum.Sum(nil)); err != nil {
		return fmt.Errorf("chanlimit: Snapshot: %w", err)
	}
	return nil
}

// appendTo appends the version and p, as a snapshot's header holds them.
func (p params) appendTo(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, snapshotVersion)
	dst = wire.AppendString(dst, p.algorithm)
	dst = binary.AppendUvarint(dst, uint64(p.limit))
	dst = binary.AppendUvarint(dst, uint64(p.window))
	return binary.AppendUvarint(dst, uint64(p.capacity))
}

// Restore replaces the state of every key with what a Snapshot holds: a
// key in it decides as it would have in the router that took it, had that
// router run on until now (the time since the snapshot counts; a clock
// that reads earlier than the snapshot counts none), and every other key is
// untouched. Keys are placed by this router's hash, so its Partitions may
// differ from the snapshot's; a partition then given more than its share
// of MaxKeys keeps them all until a new key comes: it then lets its idle
// keys go and, with EvictLRU, evicts its least recently used ones until it
// is below its share; without, refuses the new key until it is. Restores
// run one at a time.
//
// Restore reads all of rd and checks it before it changes anything: a
// truncated or corrupted snapshot, one of another version, one taken under
// another Algorithm, Limit, Window or Burst, one with a key longer than
// MaxKeyBytes or more keys than MaxKeys, is refused with an error wrapping
// ErrBadSnapshot and the reason, and nothing is loaded. Then every
// partition takes its new keys as one message between two requests; that
// step is not interrupted by ctx, so a Restore that returns nil loaded
// everything, and one that returns an error loaded nothing, unless the
// router was closed while it loaded (ErrClosed).
func (r *Router) Restore(ctx context.Context, rd io.Reader) error {
	select { // one Restore at a time, so that two never mix their tables
	case r.restoring <- struct{}{}:
		defer func() { <-r.restoring }()
	case <-ctx.Done():
		return fmt.Errorf("chanlimit: Restore: %w", ctx.Err())
	}
	data, err := io.ReadAll(rd)
	if err != nil {
		return fmt.Errorf("chanlimit: Restore: %w", err)
	}
	tables, err := r.load(ctx, data)
	if err != nil {
		return fmt.Errorf("chanlimit: Restore: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("chanlimit: Restore: %w", err)
	}
	err = r.each(context.Background(), func(i int, s *actor.State) error { // past checking: not to be interrupted
		s.Table.Replace(tables[i])
		return nil
	})
	if err != nil {
		return fmt.Errorf("chanlimit: Restore: %w", err)
	}
	return nil
}

// badSnapshot returns an ErrBadSnapshot with the reason.
func badSnapshot(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadSnapshot, fmt.Sprintf(format, args...))
}

// load checks data and loads its keys into new tables, one per partition,
// as of each partition's now.
func (r *Router) load(ctx context.Context, data []byte) ([]keytable.Table, error) {
	body, ok := bytes.CutPrefix(data, []byte(snapshotMagic))
	if !ok {
		return nil, badSnapshot("not a chanlimit snapshot")
	}
	if len(body) < crc32.Size {
		return nil, badSnapshot("truncated")
	}
	body, sum := body[:len(body)-crc32.Size], body[len(body)-crc32.Size:]
	if crc32.Checksum(data[:len(data)-crc32.Size], castagnoli) != binary.BigEndian.Uint32(sum) {
		return nil, badSnapshot("checksum mismatch: truncated or corrupted")
	}
	rd := wire.Reader{Src: body}
	version := rd.Uvarint()
	if rd.Err == nil && version != 1 && version != snapshotVersion {
		return nil, badSnapshot("version %d; this chanlimit reads versions 1 and %d", version, snapshotVersion)
	}
	var got params
	got.algorithm = string(rd.Bytes())
	got.limit, got.window, got.capacity = int(rd.Uvarint()), time.Duration(rd.Uvarint()), int(rd.Uvarint())
	if rd.Err == nil && got != r.params {
		return nil, badSnapshot("taken under %s, Limit %d, Window %v, capacity %d; this router has %s, Limit %d, Window %v, capacity %d",
			got.algorithm, got.limit, got.window, got.capacity, r.params.algorithm, r.params.limit, r.params.window, r.params.capacity)
	}

	// Each partition's now, to load at, and the time of day it stands for,
	// not after its instant, or a restore would count time that did not
	// pass: the earlier of the time of day, read before any partition's
	// now, and the time the partition counted since Start.
	var wall time.Time
	if err := supervise.Call(ErrClockPanic, func() { wall = r.clock.Now() }); err != nil {
		r.panicked.Add(1)
		return nil, err
	}
	nows := make([]time.Duration, len(r.parts))
	walls := make([]time.Time, len(r.parts))
	err := r.each(ctx, func(i int, s *actor.State) error {
		if s.ClockErr != nil {
			return s.ClockErr // a now from before: loaded at it, the keys would age twice
		}
		nows[i], walls[i] = s.Now, earlier(wall, s.Wall)
		return nil
	})
	if err != nil {
		return nil, err
	}
	tables := make([]keytable.Table, len(r.parts))
	for i := range tables {
		tables[i] = r.rule.NewTable()
	}
	defer func() { // the rule's panics while loading count as the router's
		for _, t := range tables {
			r.panicked.Add(t.Counts(math.MinInt64).Panicked) // no key is idle then: nothing is asked
		}
	}()
	sections := rd.Uvarint()
	for s := uint64(0); s < sections && rd.Err == nil; s++ {
		var taken time.Time
		if version == 1 {
			taken = time.Unix(0, rd.Varint())
		} else {
			sec, nsec := rd.Varint(), rd.Uvarint()
			if nsec >= uint64(time.Second) {
				return nil, badSnapshot("section %d: %d nanoseconds in a second", s, nsec)
			}
			taken = time.Unix(sec, int64(nsec))
		}
		keys := rd.Uvarint()
		entries := rd.Bytes()
		for k := uint64(0); k < keys && rd.Err == nil; k++ {
			key, state, rest, err := keytable.NextEntry(entries)
			if err != nil {
				return nil, badSnapshot("section %d, entry %d: %v", s, k, err)
			}
			if len(key) > r.maxKeyBytes {
				return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, r.keyTooLong(key))
			}
			pi := r.partitionIndex(key)
			age := max(walls[pi].Sub(taken), 0)
			if err := tables[pi].Load(key, state, nows[pi], age); err != nil {
				return nil, err
			}
			entries = rest
		}
		if rd.Err == nil && len(entries) > 0 {
			return nil, badSnapshot("section %d: %d bytes after its %d entries", s, len(entries), keys)
		}
	}
	switch {
	case rd.Err != nil:
		return nil, badSnapshot("%v", rd.Err)
	case len(rd.Src) > 0:
		return nil, badSnapshot("%d bytes after the last section", len(rd.Src))
	}
	if r.maxKeys > 0 {
		held := 0
		for _, t := range tables {
			held += t.Len()
		}
		if held > r.maxKeys {
			return nil, fmt.Errorf("%w: %w: it holds %d keys, MaxKeys is %d", ErrBadSnapshot, ErrTooManyKeys, held, r.maxKeys)
		}
	}
	return tables, nil
}

// later returns the later of the times of day a and b, and earlier the
// earlier. (Round(0) drops a monotonic reading, by which time.Time would
// compare otherwise: a step of the time of day is what they are for.)
func later(a, b time.Time) time.Time {
	if a, b = a.Round(0), b.Round(0); a.Before(b) {
		return b
	}
	return a
}

func earlier(a, b time.Time) time.Time {
	if a, b = a.Round(0), b.Round(0); a.After(b) {
		return b
	}
	return a
}
