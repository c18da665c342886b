package chanlimit

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/wire"
)

// PartitionStats are one partition's figures.
type PartitionStats = actor.Stats

// Stats are a router's figures, summed over its partitions. Each
// partition's figures are taken as its turn comes, so the sums are not of
// one instant; the counts are since New, of answers delivered (Panicked
// also counts panics with no request to answer; see PartitionStats).
type Stats struct {
	Keys     int    // keys held whose state is not untouched
	Idle     int    // keys held, untouched, still to be forgotten (see README)
	Queued   int    // requests waiting in mailboxes
	Allowed  uint64 // decisions that allowed (a batch's one by one)
	Denied   uint64 // decisions that denied
	Refused  uint64 // requests a partition refused (ErrTooManyKeys)
	Panicked uint64 // requests failed with ErrAlgorithmPanic, and keys dropped when their rule panicked with no request to fail
	Expired  uint64 // keys forgotten once untouched again
	Evicted  uint64 // keys dropped with their state to make room (EvictLRU)

	Partitions []PartitionStats
}

// Stats asks every partition for its figures, through its mailbox. Keys
// counts the keys whose state is not untouched, so a key leaves it the
// moment it is untouched. The partitions forget such keys a few per
// message, after a second's grace (see README): until then they count in
// Idle, and Keys + Idle is what the partitions hold in memory. To keep a
// Stats message short, a partition reads at most 16,384 entries of its
// deadline heap to count Idle: when more of its keys than that are due at
// once (or have deadlines the heap has yet to catch up with), Keys counts
// some untouched keys too, never fewer than the keys in use.
func (r *Router) Stats(ctx context.Context) (Stats, error) {
	st := Stats{Partitions: make([]PartitionStats, len(r.parts))}
	for i, p := range r.parts {
		ps, err := p.Stats(ctx)
		if err != nil {
			return Stats{}, err
		}
		st.Partitions[i] = ps
		st.Keys += ps.Keys
		st.Idle += ps.Idle
		st.Queued += ps.Queued
		st.Allowed += ps.Allowed
		st.Denied += ps.Denied
		st.Refused += ps.Refused
		st.Panicked += ps.Panicked
		st.Expired += ps.Expired
		st.Evicted += ps.Evicted
	}
	return st, nil
}

// params are what a snapshot must have been taken under to be restored:
// the algorithm's name, Limit, Window, and the capacity Burst gave it.
type params struct {
	algorithm string
	limit     int
	window    time.Duration
	capacity  int
}

// The snapshot format, version 1. Integers are varints (encoding/binary),
// strings a uvarint length and the bytes.
//
//	magic     "chanlimit snapshot\n"
//	version   uvarint, 1
//	params    algorithm string, Limit uvarint, Window uvarint, capacity uvarint
//	sections  uvarint, then each: taken varint (Unix ns of the clock),
//	          keys uvarint, size uvarint, then size bytes of entries
//	          (algorithms.NextEntry)
//	checksum  CRC-32C of all of the above, 4 bytes big-endian
const (
	snapshotMagic   = "chanlimit snapshot\n"
	snapshotVersion = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot writes the state of every key that is not untouched to w,
// partition by partition: each partition answers with its keys as they
// stand between two of its requests, in the mailbox's order, and goes on.
// Restore reads it back. Each partition's part records the clock's reading,
// so the time that passes before the restore counts, as it would have had
// the router kept running. Snapshot returns ctx.Err() if ctx is done before
// every partition has answered, ErrClosed if the router closes, w's error,
// and an error wrapping errors.ErrUnsupported if the algorithm cannot save
// its states; what it wrote to w then is not a snapshot.
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
			err  error
		)
		entries, keys, wall, err = p.Snapshot(ctx, entries[:0])
		if err != nil {
			return fmt.Errorf("chanlimit: Snapshot: %w", err)
		}
		section = binary.AppendVarint(section[:0], wall.UnixNano())
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
// of MaxKeys keeps them all until a new key comes: it then forgets its
// untouched keys and, with EvictLRU, evicts its least recently used ones
// until it is below its share; without, refuses the new key until it is.
// Restores run one at a time.
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
	for i, p := range r.parts { // past checking: not to be interrupted
		if err := p.Swap(context.Background(), tables[i], r.keyLimit(i)); err != nil {
			return fmt.Errorf("chanlimit: Restore: %w", err)
		}
	}
	return nil
}

// badSnapshot returns an ErrBadSnapshot with the reason.
func badSnapshot(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadSnapshot, fmt.Sprintf(format, args...))
}

// load checks data and loads its keys into new tables, one per partition,
// as of each partition's now.
func (r *Router) load(ctx context.Context, data []byte) (tables []algorithms.Table, err error) {
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
	if v := rd.Uvarint(); rd.Err == nil && v != snapshotVersion {
		return nil, badSnapshot("version %d; this chanlimit reads version %d", v, snapshotVersion)
	}
	var got params
	got.algorithm = string(rd.Bytes())
	got.limit, got.window, got.capacity = int(rd.Uvarint()), time.Duration(rd.Uvarint()), int(rd.Uvarint())
	if rd.Err == nil && got != r.params {
		return nil, badSnapshot("taken under %s, Limit %d, Window %v, capacity %d; this router has %s, Limit %d, Window %v, capacity %d",
			got.algorithm, got.limit, got.window, got.capacity, r.params.algorithm, r.params.limit, r.params.window, r.params.capacity)
	}

	// Each partition's now, and the clock's reading there, to load at.
	nows := make([]time.Duration, len(r.parts))
	walls := make([]time.Time, len(r.parts))
	for i, p := range r.parts {
		if nows[i], walls[i], err = p.Now(ctx); err != nil {
			return nil, err
		}
	}
	tables = make([]algorithms.Table, len(r.parts))
	for i := range tables {
		tables[i] = r.alg.NewTable()
	}
	defer func() { // a custom algorithm's codec
		if v := recover(); v != nil {
			tables, err = nil, fmt.Errorf("%w: %w", ErrBadSnapshot, fmt.Errorf("%w: %v", ErrAlgorithmPanic, v))
		}
	}()
	sections := rd.Uvarint()
	for s := uint64(0); s < sections && rd.Err == nil; s++ {
		taken := time.Unix(0, rd.Varint())
		keys := rd.Uvarint()
		entries := rd.Bytes()
		for k := uint64(0); k < keys && rd.Err == nil; k++ {
			key, state, rest, err := algorithms.NextEntry(entries)
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
