package chanlimit

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/chanlimit/chanlimit/actor"
)

// KeyCount is a key TopDenied lists, and the denials it counted of it.
type KeyCount struct {
	Key   string
	Count uint64 // the denials counted; it may overestimate: Count-Err <= the true count <= Count
	Err   uint64 // the most Count may overestimate by
}

// TopDenied returns up to n keys with the most denials of the last
// minute, most first (ties in the order of their keys): who is being
// limited right now. The denials counted are those AllowN, Allow, each
// item of AllowBatch and AllowEach, and WaitN refused at once returned to
// their callers (not a Peek's, not a request whose caller left), as
// Stats.Denied counts them.
//
// Each partition counts its own keys' denials, on its own goroutine, in
// two generations of a minute each on its clock (the current one and the
// one before), each a summary of at most 64 keys (Space-Saving), so "the
// last minute" is at least the last 60 s and at most the last 120 s, and
// the memory it takes is bounded whatever the number of keys. A key is
// listed with what both generations counted of it; where one of them
// does not hold it, with the most that one may have counted, so Count
// may overestimate: Count-Err <= the true count <= Count. A key with more
// than 1/64 of its partition's counted denials in one generation is in
// that generation's summary, and is listed unless n keys have a higher
// Count. With a Store, a router counts the denials it answered itself:
// each instance sharing a Redis has its own list.
//
// Its errors are Stats': ctx.Err(), ErrClosed; and an error for an n
// below 0. An n of 0 lists nothing.
func (r *Router) TopDenied(ctx context.Context, n int) ([]KeyCount, error) {
	if n < 0 {
		return nil, fmt.Errorf("chanlimit: TopDenied: n must be at least 0 (got %d)", n)
	}
	var all []KeyCount
	err := r.each(ctx, func(_ int, s *actor.State) error {
		s.EachDenied(func(key string, count, e uint64) {
			all = append(all, KeyCount{Key: key, Count: count, Err: e})
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(all, func(a, b KeyCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Key, b.Key))
	})
	return all[:min(n, len(all))], nil
}
