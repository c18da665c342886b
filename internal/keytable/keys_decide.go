package keytable

import (
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// errUnknownOp answers an item whose Op is none of actor's.
var errUnknownOp = fmt.Errorf("keytable: unknown Op")

// Decide is the one way a partition has its keys decide (actor.Table):
// each item goes to its key's table as its Op says, and a run of OpAllow
// items, a batch, goes to each table at once (AllowEach). Each table call
// notes the table calling into a rule (asking), for Abandoned.
func (k *Keys) Decide(items []Item, now time.Duration) {
	if len(items) == 1 { // a single request, the partition's most common
		k.decide(&items[0], now)
		return
	}
	for len(items) > 0 {
		run := 1
		for run < len(items) && items[0].Op == OpAllow && items[run].Op == OpAllow {
			run++
		}
		if run > 1 {
			k.AllowEach(items[:run], now)
		} else {
			k.decide(&items[0], now)
		}
		items = items[run:]
	}
}

// decide serves one item, as its Op says, on its key's table, which it
// notes as the table calling into a rule meanwhile (asking, for
// Abandoned).
func (k *Keys) decide(it *Item, now time.Duration) {
	if it.Skip {
		return
	}
	t := k.tableOf(it.Key)
	k.asking = t
	switch it.Op {
	case OpAllow:
		it.Err = t.AllowN(it.Key, now, it.N, &it.D)
	case OpTurn:
		it.Err = t.AllowTurn(it.Key, now, it.N, &it.D)
	case OpPeek:
		it.Err = t.PeekN(it.Key, now, it.N, &it.D)
	case OpDryRun, OpDryPeek:
		var wouldDeny bool
		wouldDeny, it.Err = t.DecideDry(it.Key, now, it.N, it.Op == OpDryRun)
		it.D = algorithms.Decision{WouldDeny: wouldDeny}
	case OpRefund:
		it.D, it.Err = algorithms.Decision{}, t.Refund(it.Key, now, it.N)
	case OpGiveBack:
		it.D, it.Err = algorithms.Decision{}, t.GiveBack(it.Key, now, it.N)
	case OpReset:
		t.Reset(it.Key)
		it.D, it.Err = algorithms.Decision{}, nil
	default:
		it.D, it.Err = algorithms.Decision{}, errUnknownOp
	}
	k.asking = nil
}

// The one-kind forms of Decide, for the package's tests, a Store's local
// keys (storetable) and the benchmarks: each is one item of its Op.

func (k *Keys) AllowN(key string, now time.Duration, n int, d *algorithms.Decision) error {
	return k.decideOne(OpAllow, key, now, n, d)
}

func (k *Keys) AllowTurn(key string, now time.Duration, n int, d *algorithms.Decision) error {
	return k.decideOne(OpTurn, key, now, n, d)
}

func (k *Keys) PeekN(key string, now time.Duration, n int, d *algorithms.Decision) error {
	return k.decideOne(OpPeek, key, now, n, d)
}

func (k *Keys) DecideDry(key string, now time.Duration, n int, take bool) (bool, error) {
	op := OpDryPeek
	if take {
		op = OpDryRun
	}
	var d algorithms.Decision
	err := k.decideOne(op, key, now, n, &d)
	return d.WouldDeny, err
}

func (k *Keys) Refund(key string, now time.Duration, n int) error {
	return k.decideOne(OpRefund, key, now, n, nil)
}

func (k *Keys) GiveBack(key string, now time.Duration, n int) error {
	return k.decideOne(OpGiveBack, key, now, n, nil)
}

func (k *Keys) Reset(key string) { k.decideOne(OpReset, key, 0, 0, nil) }

// decideOne decides an item of op for n units on key at now, and writes its
// decision into d, if d is not nil.
func (k *Keys) decideOne(op Op, key string, now time.Duration, n int, d *algorithms.Decision) error {
	it := Item{Key: key, N: n, Op: op}
	k.decide(&it, now)
	if d != nil {
		*d = it.D
	}
	return it.Err
}

func (k *Keys) HasDryRun(key string) bool { return k.tableOf(key).HasDryRun(key) }

// AllowEach hands each table its items: those of keys with an override to
// their override's table, the others to the router's, each table deciding
// its own in order. Items of one key are in one table, so their order
// holds.
func (k *Keys) AllowEach(items []Item, now time.Duration) {
	if len(k.overrides) == 0 {
		k.asking = k.def
		k.def.allowEach(items, now, nil, 0)
		k.asking = nil
		return
	}
	k.pick = k.pick[:0]
	k.picked = k.picked[:0]
	for i := range items {
		o, ok := k.overrides[items[i].Key]
		if !ok {
			k.pick = append(k.pick, 0)
			continue
		}
		k.pick = append(k.pick, int32(o.at)+1)
		if !containsOverride(k.picked, o) {
			k.picked = append(k.picked, o)
		}
	}
	k.asking = k.def
	k.def.allowEach(items, now, k.pick, 0)
	for _, o := range k.picked {
		k.asking = o.table
		o.table.allowEach(items, now, k.pick, int32(o.at)+1)
	}
	k.asking = nil
	clear(k.picked)
}

func containsOverride(list []*overrideTable, o *overrideTable) bool {
	for _, p := range list {
		if p == o {
			return true
		}
	}
	return false
}
