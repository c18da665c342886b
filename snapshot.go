package chanlimit

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"strings"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/internal/keytable"
	"github.com/chanlimit/chanlimit/internal/storetable"
	"github.com/chanlimit/chanlimit/internal/supervise"
	"github.com/chanlimit/chanlimit/internal/wire"
)

// The snapshot format. Integers are varints (encoding/binary), strings a
// uvarint length and the bytes.
//
//	magic     "chanlimit snapshot\n"
//	version   uvarint: 4 (1, 2 and 3 are read too)
//	policies  the router's: uvarint count, then each policy:
//	          name string, algorithm string, Limit uvarint, Window
//	          uvarint, Burst uvarint, flags uvarint (bit 0: DryRun;
//	          version 4 only: version 3's policies are enforced)
//	          (versions 1 and 2: one policy, named "default": algorithm
//	          string, Limit uvarint, Window uvarint, capacity uvarint)
//	sections  uvarint, then each, a partition's:
//	          taken: the clock's reading, Unix seconds varint and
//	                 nanoseconds uvarint (version 1: Unix ns varint,
//	                 which holds only the years 1678 to 2262)
//	          overrides uvarint, then each: key string, policies
//	                 (versions 3 and 4)
//	          keys uvarint, size uvarint, then size bytes of entries
//	          (keytable.NextEntry), each state a key's states under its
//	          policies, each a uvarint length and the bytes (versions 1
//	          and 2: the one policy's state, bare)
//	checksum  CRC-32C of all of the above, 4 bytes big-endian
const (
	snapshotMagic   = "chanlimit snapshot\n"
	snapshotVersion = 4
)

// policyDryRun is the bit of a policy's flags that says it is DryRun.
const policyDryRun = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot writes the state of every key that is not idle to w, with the
// router's policies and every key's override, partition by partition: each
// partition answers with its keys as they stand between two of its
// requests, in the mailbox's order, and goes on. Restore reads it back.
// Each partition's part records the clock's reading, so the time that
// passes before the restore counts, as it would have had the router kept
// running. Snapshot waits for SetPolicies and Restore calls to finish, and
// they for it (and so for w). It returns ctx.Err() if ctx is
// done before every partition has answered, ErrClosed if the router
// closes, ErrClockPanic, w's error, and an error wrapping
// errors.ErrUnsupported if an algorithm cannot save its states; what it
// wrote to w then is not a snapshot.
func (r *Router) Snapshot(ctx context.Context, w io.Writer) error {
	if r.store != nil {
		return fmt.Errorf("chanlimit: Snapshot: %w", storetable.ErrSnapshot)
	}
	release, err := takeToken(ctx, r.policiesToken)
	if err != nil {
		return fmt.Errorf("chanlimit: Snapshot: %w", err)
	}
	defer release()
	sum := crc32.New(castagnoli)
	out := io.MultiWriter(w, sum)
	policies := r.policies.Load()
	head := binary.AppendUvarint([]byte(snapshotMagic), snapshotVersion)
	head = appendPolicies(head, policies)
	head = binary.AppendUvarint(head, uint64(len(r.parts)))
	var entries, section []byte
	for i, p := range r.parts {
		var (
			keys int
			wall time.Time
		)
		section = section[:0]
		err := p.Do(ctx, func(s *actor.State) (err error) {
			// The stamp must not be before the states' instant, or a
			// restore would count time that did not pass: the later of
			// the time of day, read after now, and the time the partition
			// counted since Start, whatever the clock's time of day did.
			if wall, err = s.ReadClock(); err != nil {
				return err
			}
			wall = later(wall, s.Wall)
			section = binary.AppendVarint(section, wall.Unix())
			section = binary.AppendUvarint(section, uint64(wall.Nanosecond()))
			k := keysOf(s)
			if !k.Set().Same(policies) { // SetPolicies holds the token too: never, unless it failed half-way
				return fmt.Errorf("the partition's policies are not the router's (%s)", describe(k.Set()))
			}
			section = binary.AppendUvarint(section, uint64(k.Overrides()))
			k.EachOverride(func(key string, set *keytable.Set) {
				section = appendPolicies(wire.AppendString(section, key), set)
			})
			entries, keys, err = k.AppendSnapshot(entries[:0], s.Now)
			return err
		})
		if err != nil {
			return fmt.Errorf("chanlimit: Snapshot: %w", err)
		}
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

// appendPolicies appends the policies of set, as a snapshot holds them.
func appendPolicies(dst []byte, set *keytable.Set) []byte {
	ps := set.Policies()
	dst = binary.AppendUvarint(dst, uint64(len(ps)))
	for _, p := range ps {
		dst = wire.AppendString(wire.AppendString(dst, p.Name), p.Algorithm)
		dst = binary.AppendUvarint(dst, uint64(p.Params.Limit))
		dst = binary.AppendUvarint(dst, uint64(p.Params.Window))
		dst = binary.AppendUvarint(dst, uint64(p.Params.Burst))
		var flags uint64
		if p.DryRun {
			flags |= policyDryRun
		}
		dst = binary.AppendUvarint(dst, flags)
	}
	return dst
}

// readPolicies reads the policies appendPolicies wrote in a snapshot of
// version, and makes them a set; it caches the sets it made in sets, so
// that overrides alike share one. Its error wraps ErrBadSnapshot.
func readPolicies(rd *wire.Reader, sets map[string]*keytable.Set, version uint64) (*keytable.Set, error) {
	start := rd.Src
	n := rd.Uvarint()
	if rd.Err == nil && n > uint64(len(rd.Src)) { // each takes bytes: a bound before allocating
		return nil, badSnapshot("%d policies in %d bytes", n, len(rd.Src))
	}
	ps := make([]Policy, 0, min(n, 16)) // grown as they are read: n is only bounded by the bytes left
	for range n {
		var p Policy
		p.Name, p.Algorithm = string(rd.Bytes()), string(rd.Bytes())
		limit, window, burst := rd.Uvarint(), rd.Uvarint(), rd.Uvarint()
		var flags uint64
		if version >= 4 {
			flags = rd.Uvarint()
		}
		if rd.Err != nil {
			return nil, badSnapshot("policies: %v", rd.Err)
		}
		if limit > math.MaxInt64 || window > math.MaxInt64 || burst > math.MaxInt64 || flags&^policyDryRun != 0 {
			return nil, badSnapshot("policy %q: a field out of range", p.Name)
		}
		p.Limit, p.Window, p.Burst, p.DryRun = int(limit), time.Duration(window), int(burst), flags&policyDryRun != 0
		ps = append(ps, p)
	}
	if rd.Err != nil {
		return nil, badSnapshot("policies: %v", rd.Err)
	}
	id := string(start[:len(start)-len(rd.Src)])
	if set, ok := sets[id]; ok {
		return set, nil
	}
	set, err := compile("policies", ps)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	sets[id] = set
	return set, nil
}

// describe returns the policies of set as a reader would write them.
func describe(set *keytable.Set) string {
	var b strings.Builder
	for j, p := range set.Policies() {
		if j > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q: %s, Limit %d, Window %v, capacity %d", p.Name, p.Algorithm, p.Params.Limit, p.Params.Window, p.Rule.Capacity())
	}
	return b.String()
}

// Restore replaces the state of every key, and every override, with what a
// Snapshot holds: a key in it decides as it would have in the router that
// took it, had that router run on until now (the time since the snapshot
// counts; a clock that reads earlier than the snapshot counts none), under
// the override it had, if any; every other key is untouched and has no
// override. Keys are placed by this router's hash, so its Partitions may
// differ from the snapshot's; a partition then given more than its share
// of MaxKeys keeps them all until a new key comes: it then lets its idle
// keys go and, with EvictLRU, evicts its least recently used ones until it
// is below its share; without, refuses the new key until it is. Restore
// waits for SetPolicies, SetOverride, ClearOverride and Snapshot calls to
// finish, and they for it.
//
// Restore reads all of rd and checks it before it changes anything: a
// truncated or corrupted snapshot, one of another version, one taken under
// other policies (names, algorithms, Limits, Windows or capacities), one
// with a key longer than MaxKeyBytes, more keys than MaxKeys or more
// overrides than MaxOverrides, is refused with an error wrapping
// ErrBadSnapshot and the reason, and nothing is loaded. Then every
// partition takes its new keys as one message between two requests; that
// step is not interrupted by ctx, so a Restore that returns nil loaded
// everything, and one that returns an error loaded nothing, unless the
// router was closed while it loaded (ErrClosed).
func (r *Router) Restore(ctx context.Context, rd io.Reader) error {
	if r.store != nil {
		return fmt.Errorf("chanlimit: Restore: %w", storetable.ErrSnapshot)
	}
	release, err := takeToken(ctx, r.policiesToken)
	if err != nil {
		return fmt.Errorf("chanlimit: Restore: %w", err)
	}
	defer release()
	releaseOverrides, err := takeToken(ctx, r.overridesToken)
	if err != nil {
		return fmt.Errorf("chanlimit: Restore: %w", err)
	}
	defer releaseOverrides()
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
		k := keysOf(s)
		before := k.Overrides()
		k.Replace(tables[i])
		r.overrides.Add(int64(k.Overrides() - before))
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
func (r *Router) load(ctx context.Context, data []byte) ([]*keytable.Keys, error) {
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
	if rd.Err == nil && (version < 1 || version > snapshotVersion) {
		return nil, badSnapshot("version %d; this chanlimit reads versions 1 to %d", version, snapshotVersion)
	}
	own := r.policies.Load()
	sets := make(map[string]*keytable.Set)
	if version >= 3 {
		got, err := readPolicies(&rd, sets, version)
		if err != nil {
			return nil, err
		}
		if !got.SameStates(own) {
			return nil, badSnapshot("taken under policies %s; this router has %s", describe(got), describe(own))
		}
	} else {
		algorithm := string(rd.Bytes())
		limit, window, capacity := int(rd.Uvarint()), time.Duration(rd.Uvarint()), int(rd.Uvarint())
		ps := own.Policies()
		if rd.Err == nil && (len(ps) != 1 || ps[0].Name != DefaultPolicyName || ps[0].Algorithm != algorithm ||
			ps[0].Params.Limit != limit || ps[0].Params.Window != window || ps[0].Rule.Capacity() != capacity) {
			return nil, badSnapshot("taken under %s, Limit %d, Window %v, capacity %d (policy %q); this router has %s",
				algorithm, limit, window, capacity, DefaultPolicyName, describe(own))
		}
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
	tables := make([]*keytable.Keys, len(r.parts))
	for i := range tables {
		tables[i] = keytable.NewKeys(own)
	}
	defer func() { // the rules' panics while loading count as the router's
		for _, t := range tables {
			r.panicked.Add(t.Counts(math.MinInt64).Panicked) // no key is idle then: nothing is asked
		}
	}()
	overrides := 0
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
		if version >= 3 {
			n, err := r.loadOverrides(&rd, sets, tables, nows, version)
			if err != nil {
				return nil, fmt.Errorf("%w (section %d)", err, s)
			}
			overrides += n
		}
		keys := rd.Uvarint()
		entries := rd.Bytes()
		var wrapped []byte // a version 1 or 2 state, as a version 3 one
		for k := uint64(0); k < keys && rd.Err == nil; k++ {
			key, state, rest, err := keytable.NextEntry(entries)
			if err != nil {
				return nil, badSnapshot("section %d, entry %d: %v", s, k, err)
			}
			if len(key) > r.maxKeyBytes {
				return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, r.keyTooLong(key))
			}
			if version < 3 {
				wrapped = wire.AppendBytes(wrapped[:0], state)
				state = wrapped
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
	case r.maxOverrides > 0 && overrides > r.maxOverrides:
		return nil, fmt.Errorf("%w: %w: it holds %d overrides, MaxOverrides is %d", ErrBadSnapshot, ErrTooManyOverrides, overrides, r.maxOverrides)
	}
	if r.maxKeys > 0 {
		held := 0
		for _, t := range tables {
			held += t.Capped()
		}
		if held > r.maxKeys {
			return nil, fmt.Errorf("%w: %w: it holds %d keys, MaxKeys is %d", ErrBadSnapshot, ErrTooManyKeys, held, r.maxKeys)
		}
	}
	return tables, nil
}

// loadOverrides reads the overrides of a section and sets them in tables,
// and returns how many there were.
func (r *Router) loadOverrides(rd *wire.Reader, sets map[string]*keytable.Set, tables []*keytable.Keys, nows []time.Duration, version uint64) (int, error) {
	n := rd.Uvarint()
	if rd.Err == nil && n > uint64(len(rd.Src)) {
		return 0, badSnapshot("%d overrides in %d bytes", n, len(rd.Src))
	}
	for o := uint64(0); o < n && rd.Err == nil; o++ {
		key := string(rd.Bytes())
		if rd.Err != nil {
			break
		}
		if len(key) > r.maxKeyBytes {
			return 0, fmt.Errorf("%w: override: %w", ErrBadSnapshot, r.keyTooLong(key))
		}
		set, err := readPolicies(rd, sets, version)
		if err != nil {
			return 0, fmt.Errorf("%w (override of key %q)", err, key)
		}
		pi := r.partitionIndex(key)
		if tables[pi].Override(key) != nil {
			return 0, badSnapshot("key %q has two overrides", key)
		}
		tables[pi].SetOverride(key, set, nows[pi])
	}
	if rd.Err != nil {
		return 0, badSnapshot("overrides: %v", rd.Err)
	}
	return int(n), nil
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
