package actor

import (
	"context"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// The caller's side of the protocol: each method sends one message on
// the mailbox and waits for its answer on a reply channel of its own, or
// gives up (abandon) when its context ends.

// AllowN asks the partition to decide n units for key; n must lie in
// [1, the rule's capacity]. It returns the decision, ErrClosed, ctx.Err(),
// or the table's error.
func (p *Partition) AllowN(ctx context.Context, key string, n int) (algorithms.Decision, error) {
	r := p.call(ctx, Message{kind: KindAllow, key: key, n: n})
	return r.d, r.err
}

// AllowQuota is AllowN, and once the request is decided it writes into q
// what key has under each of its policies (see fillQuota), in the same
// round trip: what an HTTP RateLimit field tells. q is the partition's
// until AllowQuota returns; after it returned ctx's error, the caller must
// not touch q again.
func (p *Partition) AllowQuota(ctx context.Context, key string, n int, q *Quota) (algorithms.Decision, error) {
	r := p.call(ctx, Message{kind: KindAllow, key: key, n: n, arg: q})
	return r.d, r.err
}

// PeekQuota is PeekN, and writes into q what AllowQuota would.
func (p *Partition) PeekQuota(ctx context.Context, key string, n int, q *Quota) (algorithms.Decision, error) {
	r := p.call(ctx, Message{kind: KindPeek, key: key, n: n, arg: q})
	return r.d, r.err
}

// PeekN asks the partition what AllowN would answer now, changing nothing.
func (p *Partition) PeekN(ctx context.Context, key string, n int) (algorithms.Decision, error) {
	r := p.call(ctx, Message{kind: KindPeek, key: key, n: n})
	return r.d, r.err
}

// Reset asks the partition to drop key, so that it is untouched again.
func (p *Partition) Reset(ctx context.Context, key string) error {
	return p.call(ctx, Message{kind: KindReset, key: key}).err
}

// Refund asks the partition to give n units back to key's policies now
// (Table's Refund); the key's waiters are served as soon as that
// lets them. n must lie in [1, MaxInt].
func (p *Partition) Refund(ctx context.Context, key string, n int) error {
	return p.call(ctx, Message{kind: KindRefund, key: key, n: n}).err
}

// Hold asks the partition to keep key from being granted anything for d
// from now (Holder): a d of 0 or less changes nothing. It returns
// ErrClosed, ctx.Err(), or the table's error; a table that cannot hold
// answers an error wrapping errors.ErrUnsupported.
func (p *Partition) Hold(ctx context.Context, key string, d time.Duration) error {
	return p.call(ctx, Message{kind: KindHold, key: key, arg: d}).err
}

// Pending is a batch in a partition's mailbox, to be waited on.
type Pending struct {
	p        *Partition
	ch       chan reply
	stopping bool
}

// SendBatch puts items in the mailbox as one message, to be decided in
// order with one reading of the clock, and returns at once; Wait waits for
// the answers. Each item's N must lie in [1, the rule's capacity]: each
// is decided as AllowN would. Until
// Wait has returned nil, items belong to the partition: the caller must not
// touch them, and after a Wait that returned an error, never again.
func (p *Partition) SendBatch(ctx context.Context, items *[]Item) (Pending, error) {
	ch, stopping, err := p.send(ctx, Message{kind: KindBatch, arg: items})
	return Pending{p, ch, stopping}, err
}

// SendTries is SendBatch for WaitN requests that must not wait: each item
// is granted if WaitN would grant it at once (its key has no line, and the
// rule allows it with no Delay), and otherwise left not Allowed, with no
// error, having taken nothing; its errors are WaitN's.
func (p *Partition) SendTries(ctx context.Context, items *[]Item) (Pending, error) {
	ch, stopping, err := p.send(ctx, Message{kind: KindTry, arg: items})
	return Pending{p, ch, stopping}, err
}

// Wait returns nil once every item of the batch holds its decision or its
// error. If ctx is done first it returns ctx.Err() and the batch takes
// nothing (or gives back what it took), unless the answer beat the
// cancellation, in which case Wait returns nil. It returns ErrClosed if the
// partition stopped without deciding the batch.
func (pd Pending) Wait(ctx context.Context) error {
	return pd.p.wait(ctx, pd.ch, pd.stopping).err
}

// Do runs f on the partition's goroutine, between two requests, and
// returns f's error. f sees the partition's state as it stands then; it
// may read it and use its Table, and must not keep anything of it. Do
// returns ErrClosed if the partition stopped first, and ctx.Err() if ctx
// ends first: f then runs at most once, and whatever it writes, the
// caller must not read. (Pass a ctx that never ends for a step that must
// not be left half-done.) f needs no reading of the clock: if the one that
// came with this message panicked, f sees the latest that worked.
func (p *Partition) Do(ctx context.Context, f func(*State) error) error {
	return p.call(ctx, Message{kind: KindDo, arg: f}).err
}

// Queued returns the number of requests waiting in the mailbox.
func (p *Partition) Queued() int { return len(p.mailbox) }

// Stop turns new calls away with ErrClosed and tells the goroutine to answer
// what is queued and exit. It may wait for room in the mailbox, not for the
// goroutine to exit: Done is closed once it has. The goroutine exits only
// once the request it is serving returns: a rule that never returns keeps
// it, and Done, open. Stop is idempotent.
func (p *Partition) Stop() {
	p.stopOnce.Do(func() {
		close(p.stop)
		p.mailbox <- Message{kind: KindStop}
	})
}

// Done returns a channel that is closed once the goroutine has exited.
func (p *Partition) Done() <-chan struct{} { return p.done }

// call sends req and waits for its answer.
func (p *Partition) call(ctx context.Context, req Message) reply {
	ch, stopping, err := p.send(ctx, req)
	if err != nil {
		return reply{err: err}
	}
	return p.wait(ctx, ch, stopping)
}

// send puts req in the mailbox with a reply channel of its own, and returns
// that channel, and whether the partition was stopping once it was sent.
func (p *Partition) send(ctx context.Context, req Message) (ch chan reply, stopping bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	// select picks at random among ready cases: look at stop first, so that
	// a stopped partition takes no more requests.
	if closed(p.stop) {
		return nil, false, ErrClosed
	}
	if req.reply == nil { // a Ticket comes with its own
		req.reply = p.replies.Get().(chan reply)
	}
	req.deadline = deadlineOf(ctx)
	select {
	case p.mailbox <- req: // room in the mailbox: the common case
	default:
		select {
		case p.mailbox <- req:
		case <-p.stop:
			p.replies.Put(req.reply)
			return nil, false, ErrClosed
		case <-ctx.Done():
			p.replies.Put(req.reply)
			return nil, false, ctx.Err()
		}
	}
	// If stop is still open, Stop's message will come after req.
	return req.reply, closed(p.stop), nil
}

// wait returns the answer that arrives on ch, ctx.Err() if ctx is done first
// or, if the partition was stopping when the request was sent, ErrClosed if
// the goroutine exits without answering.
func (p *Partition) wait(ctx context.Context, ch chan reply, stopping bool) reply {
	done := ctx.Done()
	switch {
	case !stopping && done == nil: // context.Background and the like
		r := <-ch
		p.replies.Put(ch)
		return r
	case !stopping:
		select {
		case r := <-ch:
			p.replies.Put(ch)
			return r
		case <-done:
			return p.abandon(ctx, ch)
		}
	}
	select {
	case r := <-ch:
		return r
	case <-done:
		return p.abandon(ctx, ch)
	case <-p.done:
		// The goroutine has exited. If it drained our request, the
		// answer is there; one sent after its last look never will be.
		select {
		case r := <-ch:
			return r
		default:
			return reply{err: ErrClosed}
		}
	}
}

// closed reports whether c is closed, without waiting.
func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// abandon stops waiting on reply. Filling the channel tells the partition
// that nobody will read its answer; if the answer is there first, the caller
// takes it, since the decision has been made and applied.
func (p *Partition) abandon(ctx context.Context, ch chan reply) reply {
	select {
	case ch <- reply{}: // the mark; the channel is never reused
		return reply{err: ctx.Err()}
	default:
		r := <-ch
		p.replies.Put(ch)
		return r
	}
}
