package actor

import (
	"cmp"
	"context"
	"errors"

	"github.com/chanlimit/chanlimit/algorithms"
)

// A Ticket is a wait that StartWait put in its key's line: a WaitN whose
// caller does not block on it, so that one goroutine can have many waits
// out, on many keys, with no goroutine and no timer for each. It waits in
// the line as a WaitN caller does. Once the partition has answered it, it
// sends the Ticket on the channel StartWait was given (it rings), and
// Answer returns the answer.
//
// A Ticket is its owner's: Answer and Leave are for the goroutine that
// received it, not for simultaneous use.
type Ticket struct {
	p     *Partition
	key   string
	ch    chan reply     // its answer, exactly one
	ready chan<- *Ticket // where it rings

	rung    bool                             // set on the partition's goroutine before it rings; read once the goroutine has exited
	observe func(algorithms.Decision, error) // StartWaitObserved's, told of the answer as Answer first reads it

	// The owner's:
	left     error // Leave's reason, the answer if it left first
	answered bool
	r        reply
}

// StartWait puts a request for n units on key in key's line, as WaitN
// does, and returns without waiting for the grant, with the request's
// Ticket. The answer, WaitN's (its grant, or an error: ErrTooManyWaiters,
// ErrClosed, one matching context.DeadlineExceeded if ctx's deadline comes
// before the grant, the table's), comes with the Ticket on ready, once.
// ctx counts until the request is in line: its end while the request
// waits for room in the mailbox, and its deadline, which is compared with
// the grant's time when the request joins the line, as WaitN's. After
// that, the request waits until it is answered or Leave takes it out:
// nothing watches ctx.
//
// ready should have room for every Ticket started on it and not received
// yet, since the partition never waits to ring: a Ticket that finds ready
// full is sent by a goroutine of its own, made for it then.
//
// StartWait returns an error, and no Ticket, if ready is nil, or if ctx
// is done or the partition stopped before the request was in the mailbox.
// If the
// partition was stopping as it sent the request, it waits for the
// goroutine to exit, and the Ticket rings with ErrClosed if the goroutine
// exited without answering it.
func (p *Partition) StartWait(ctx context.Context, key string, n int, ready chan<- *Ticket) (*Ticket, error) {
	return p.StartWaitObserved(ctx, key, n, ready, nil)
}

// StartWaitObserved is StartWait, and has the Ticket call observe, if not
// nil, with its answer when Answer first reads it, on the goroutine that
// reads it, before Answer returns; not if Leave took it out of its line
// before it was answered.
func (p *Partition) StartWaitObserved(ctx context.Context, key string, n int, ready chan<- *Ticket, observe func(algorithms.Decision, error)) (*Ticket, error) {
	if ready == nil {
		return nil, errNoReady
	}
	t := &Ticket{p: p, key: key, ready: ready, ch: p.replies.Get().(chan reply), observe: observe}
	_, stopping, err := p.send(ctx, Message{kind: KindWait, key: key, n: n, reply: t.ch, arg: t})
	if err != nil {
		return nil, err
	}
	if stopping {
		p.settle(t)
	}
	return t, nil
}

// settle waits for the goroutine to exit, and answers t with ErrClosed if
// it has not: t was sent as the partition stopped, so it may have come
// after the goroutine's last look, and nobody would answer it. Once the
// goroutine has exited, either it rang t, or nobody will.
func (p *Partition) settle(t *Ticket) {
	<-p.done
	if !t.rung {
		t.ch <- reply{err: ErrClosed}
		ring(t)
	}
}

// Key returns the key t waits on.
func (t *Ticket) Key() string { return t.key }

// Answer returns t's answer: the grant's Decision, or WaitN's error, or
// the error Leave was given if t left its line first. Called before t has
// rung, it waits for the answer.
func (t *Ticket) Answer() (algorithms.Decision, error) {
	if !t.answered {
		t.r, t.answered = <-t.ch, true
		if t.left == nil {
			t.p.replies.Put(t.ch) // no leave can be on its way with the channel
		}
		if t.r.err == errLeft {
			t.r.err = t.left
		} else if t.observe != nil {
			t.observe(t.r.d, t.r.err)
		}
	}
	return t.r.d, t.r.err
}

// Leave takes t out of its key's line, as a WaitN caller whose ctx ends
// leaves it: t then takes nothing and counts nowhere, and rings with err
// as its answer (context.Canceled if err is nil). If t was answered first, it rings
// with that answer, and Leave changes nothing. Leave waits for room in the
// partition's mailbox, not for the answer. After Answer, or a first Leave,
// it does nothing.
func (t *Ticket) Leave(err error) {
	if t.answered || t.left != nil {
		return
	}
	t.left = cmp.Or(err, context.Canceled)
	select {
	case t.p.mailbox <- Message{kind: KindLeave, key: t.key, reply: t.ch, arg: t}:
	case <-t.p.done: // it answered every waiter before it exited
	}
}

// errNoReady is StartWait's error for a nil ready, where no Ticket could
// ever ring.
var errNoReady = errors.New("chanlimit: StartWait: ready is nil: no Ticket could come back on it")

// ring tells t's owner, if the request is a Ticket's, that its answer is
// in its channel, without waiting for room in ready.
func ring(t *Ticket) {
	if t == nil {
		return
	}
	t.rung = true
	select {
	case t.ready <- t:
	default:
		go func() { t.ready <- t }()
	}
}
