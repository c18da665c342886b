package actor

import (
	"errors"
	"fmt"
)

// The errors a partition, or a Table it drives, returns. Package chanlimit
// returns them under the same names (chanlimit.ErrClosed is ErrClosed),
// and documents what each means to a router's caller.
var (
	// ErrClosed is returned by every call on a partition that stopped,
	// and by calls that raced with Stop and were not answered.
	ErrClosed = errors.New("chanlimit: router closed")

	// ErrAlgorithmPanic is wrapped, with the panic's value, by the error
	// of a request whose rule panicked (or ran runtime.Goexit) while
	// deciding it: a Table's error, or the partition's for a Goexit.
	ErrAlgorithmPanic = errors.New("chanlimit: algorithm panicked")

	// ErrClockPanic is wrapped, with the panic's value, by the error of a
	// request that needed the time of a reading of the Clock that
	// panicked.
	ErrClockPanic = errors.New("chanlimit: clock panicked")

	// ErrTooManyKeys is wrapped by a Table's error for a request on a new
	// key it has no room for.
	ErrTooManyKeys = errors.New("chanlimit: too many keys")

	// ErrExceedsCapacity is wrapped by a Table's error for a request of
	// more units than its key's policies can ever grant at once: no wait
	// would grant it, so it is never a denial.
	ErrExceedsCapacity = errors.New("chanlimit: n exceeds capacity")

	// ErrTooManyWaiters is wrapped, with the figures, by the error of a
	// WaitN on a key whose line holds the most waiters Start allows.
	ErrTooManyWaiters = errors.New("chanlimit: too many waiters")
)

// errCannotHold answers a Hold on a table that is no Holder.
var errCannotHold = fmt.Errorf("chanlimit: this router's keys cannot be held: %w", errors.ErrUnsupported)
