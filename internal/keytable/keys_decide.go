package keytable

import (
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// Each kind of decision goes to its key's table, which Keys notes as the
// table calling into a rule meanwhile (asking), for Abandoned.

func (k *Keys) AllowN(key string, now time.Duration, n int, d *algorithms.Decision) error {
	if end, held := k.held.until(key, now); held {
		return k.denyHeld(key, now, end, n, d)
	}
	t := k.ask(key)
	err := t.AllowN(key, now, n, d)
	k.asking = nil
	return err
}

func (k *Keys) AllowTurn(key string, now time.Duration, n int, d *algorithms.Decision) error {
	if end, held := k.held.until(key, now); held {
		return k.denyHeld(key, now, end, n, d)
	}
	t := k.ask(key)
	err := t.AllowTurn(key, now, n, d)
	k.asking = nil
	return err
}

func (k *Keys) PeekN(key string, now time.Duration, n int, d *algorithms.Decision) error {
	if end, held := k.held.until(key, now); held {
		return k.denyHeld(key, now, end, n, d)
	}
	t := k.ask(key)
	err := t.PeekN(key, now, n, d)
	k.asking = nil
	return err
}

func (k *Keys) DecideDry(key string, now time.Duration, n int, take bool) (bool, error) {
	if _, held := k.held.until(key, now); held {
		return false, nil // a hold's denial takes nothing from any policy
	}
	t := k.ask(key)
	wouldDeny, err := t.DecideDry(key, now, n, take)
	k.asking = nil
	return wouldDeny, err
}

func (k *Keys) Refund(key string, now time.Duration, n int) error {
	t := k.ask(key)
	err := t.Refund(key, now, n)
	k.asking = nil
	return err
}

func (k *Keys) GiveBack(key string, now time.Duration, n int) error {
	t := k.ask(key)
	err := t.GiveBack(key, now, n)
	k.asking = nil
	return err
}

func (k *Keys) Reset(key string) {
	k.held.drop(key)
	k.ask(key).Reset(key)
	k.asking = nil
}

// ask returns the table of key, noted as the one calling into a rule
// until the caller clears asking.
func (k *Keys) ask(key string) setTable {
	t := k.tableOf(key)
	k.asking = t
	return t
}

func (k *Keys) HasDryRun(key string) bool { return k.tableOf(key).HasDryRun(key) }

// AllowEach hands each table its items: those of keys with an override to
// their override's table, the others to the router's, each table deciding
// its own in order. Items of one key are in one table, so their order
// holds.
func (k *Keys) AllowEach(items []Item, now time.Duration) {
	for i := 0; k.behind != nil && i < len(items); i++ {
		k.carry(items[i].Key) // left behind by a switch of the router's policies
	}
	if len(k.held.end) > 0 {
		defer func(marked []int) {
			for _, i := range marked {
				items[i].Skip = false
			}
		}(k.denyHeldItems(items, now))
	}
	k.allowEach(items, now)
}

// allowEach is AllowEach once the items on keys held are denied.
func (k *Keys) allowEach(items []Item, now time.Duration) {
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
