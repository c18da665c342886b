package chanlimit

import "context"

// Refund gives n units back to key, to each of its policies (dry-run ones
// included), as far as each algorithm can (docs/policies.md, "Refunds"):
// token_bucket and gcra gain n tokens, up to their capacity; leaky_bucket's
// queue shrinks by n, down to empty, so later admissions wait less;
// fixed_window and sliding_window_counter take n off the current window's
// count, down to 0 (a window that has ended is not touched);
// sliding_window_log drops its n newest units still in the window. A key
// without state is left without state, and a refund never leaves a key
// with more room than an untouched key has. Waiters on the key are served
// as soon as the refund lets them.
//
// It is how a caller counts only what should count: a request that failed
// on the server's side, an upstream call that was never made, a login that
// succeeded. With a Store the refund is made in the store, atomically.
//
// Its errors are AllowN's: ErrInvalidCount for n <= 0 and ErrKeyTooLong,
// before anything is sent; ctx.Err() if ctx is done before the refund is
// answered, ErrClosed once the router is closed, ErrAlgorithmPanic or
// ErrClockPanic. With a Store, the refund goes to the store, and fails
// with an error wrapping ErrStoreUnavailable if the store cannot take it
// (or the key's value there is corrupt), whatever the FailMode: it is
// never made on the local keys, which hold no grant of the store's. So a
// grant that FailLocal made on them while the store was down is not given
// back by Refund. On any error but the first two the refund may or may
// not have been made.
func (r *Router) Refund(ctx context.Context, key string, n int) error {
	err := r.check(key, n)
	if err == nil {
		err = r.partition(key).Refund(ctx, key, n)
	}
	if r.observe != nil {
		r.observed(ctx, Event{Kind: EventRefund, Key: key, N: n, Err: err})
	}
	return err
}
