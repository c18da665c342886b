package actor

import (
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
)

// A Partition's far side, for a loop of another package. Start serves a
// partition's messages with this package's loop, on a Table in memory.
// Open gives the same caller side (the mailbox, the reply channels, a
// caller leaving, Stop, Tickets) to a loop of its own, which reads the
// messages from Server.Mailbox and answers each through its methods: a
// router on a Store is served so, since its keys' states are elsewhere
// and each decision a round trip, which must not hold the other keys up.
//
// The loop keeps the protocol's promises as this package's does (see the
// package's doc): it answers each message once, and never blocks on a
// caller (Answer never does); it gives back a grant whose caller left
// (Answer reports it); a KindWait waits in its key's line until answered
// or its caller leaves (KindLeave); after KindStop, it answers what is
// queued and every waiter, with ErrClosed, and then calls Exit.

// Server is the far side of a Partition that Open returned.
type Server struct{ p *Partition }

// Open returns a partition that queues up to mailboxSize messages (at
// least 0), whose messages no goroutine reads, and its far side, for the
// caller's loop to serve.
func Open(mailboxSize int) (*Partition, *Server) {
	p := &Partition{
		mailbox: make(chan Message, max(mailboxSize, 0)),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	p.replies.New = func() any { return make(chan reply, 1) }
	return p, &Server{p}
}

// Mailbox is where the messages come, in the order they were sent. It is
// never closed: the last message is KindStop, and a few may follow it,
// sent as it was.
func (s *Server) Mailbox() <-chan Message { return s.p.mailbox }

// Exit tells the callers that every message and every waiter has its
// answer: those that sent theirs as the partition stopped, and may have
// come after the loop's last look at the mailbox, stop waiting (with
// ErrClosed). It is called once, when the loop ends.
func (s *Server) Exit() { close(s.p.done) }

// Kind returns the message's kind.
func (req *Message) Kind() Kind { return req.kind }

// Key returns the key of a message on one key (all but KindBatch,
// KindTry, KindDo and KindStop).
func (req *Message) Key() string { return req.key }

// N returns the units a message asks for, or gives back (KindRefund).
func (req *Message) N() int { return req.n }

// Func returns the function of a KindDo, to run on the loop's state.
func (req *Message) Func() func(*State) error {
	f, _ := req.arg.(func(*State) error)
	return f
}

// Deadline returns the deadline of the caller's context, if it has one.
func (req *Message) Deadline() (time.Time, bool) {
	if req.deadline == 0 {
		return time.Time{}, false
	}
	return epoch.Add(req.deadline), true
}

// Left reports whether the caller stopped waiting before its answer: a
// message whose caller left is skipped, not decided. (A waiter leaves
// with KindLeave instead, and is always answered.)
func (req *Message) Left() bool { return len(req.reply) > 0 }

// Answer sends the answer, without blocking, and reports whether the
// caller got it: if not, it left meanwhile, and what the answer granted is
// to be given back. A batch's or a try's answer is its items, written
// before. It is safe to call from any goroutine, once per message.
func (req *Message) Answer(d algorithms.Decision, err error) (delivered bool) {
	select {
	case req.reply <- reply{d: d, err: err}:
		ring(req.ticket())
		return true
	default:
		return false
	}
}

// AnswerLeave answers a KindLeave whose waiter was in line, now out of
// it: its caller returns its context's error.
func (req *Message) AnswerLeave() {
	req.reply <- reply{err: errLeft} // never blocks: a waiter's channel gets one answer
	ring(req.ticket())
}

// Is reports whether req and w are one waiter's: a KindLeave and the
// KindWait it takes out of line.
func (req *Message) Is(w *Message) bool { return req.reply == w.reply }

// TooLate returns the error of a wait refused at once, because its grant
// would come in wait, after the caller's deadline, in budget: it wraps
// context.DeadlineExceeded, and State.Answer counts it as a denial.
func TooLate(wait, budget time.Duration) error { return &tooLate{wait: wait, budget: budget} }

// Answer sends req its answer d, err, as Message.Answer does, and if the
// caller got it, counts it as this package's loop counts its own, in
// Counts (a batch's items one by one, a try's left to wait and a peek's
// never) and among the keys denied (EachDenied). It reports whether the
// caller got it.
func (s *State) Answer(req *Message, d algorithms.Decision, err error) (delivered bool) {
	return s.deliver(req, &reply{d: d, err: err})
}

// NewState returns a loop's state, lent to the functions of KindDo, on
// table, whose ReadClock reads clk; wall is the time of day its Now
// stands for.
func NewState(table Table, clk clock.Clock, wall time.Time) State {
	return State{Table: table, Wall: wall, clock: clk}
}
