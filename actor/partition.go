// Package actor is the partition goroutine of a chanlimit router: the one
// owner of a table of keys, which it serves one request at a time from its
// mailbox. Callers never touch the table; they send a request by value and
// read the answer from a reply channel.
//
// A partition drives its keys, in memory, through Table (table.go), which
// this package defines and documents, naming only its own types and those
// of algorithms and clock: a router's tables implement it, and so can any
// other. Its API is otherwise the router's. Its errors are its own
// (errors.go): package chanlimit returns them under the same names. A
// loop of another package may serve the same caller side (server.go): a
// router on a Store is served so.
//
// The protocol, and the property each part keeps:
//
//   - The mailbox is a bounded channel and is never closed, so a send can
//     never panic. A caller waits to send while it is full, and gives up
//     when its context is done or the partition stops.
//   - Each call has its own reply channel with a buffer of one, so the
//     partition never blocks on a caller. Channels come from a pool; one
//     that a caller abandoned is never put back.
//   - A caller that stops waiting (its context is done) marks its reply
//     channel by filling it. The partition skips a request whose channel is
//     already full, and takes back a grant it could not deliver, so a
//     cancelled call uses up no quota.
//   - Stop closes the stop channel, which turns new callers away with
//     ErrClosed, then sends a stop message; the goroutine answers what is
//     queued and exits, closing done. A caller that sees stop still open
//     after its send knows its request is ahead of the stop message, so it
//     waits on its reply alone; one that sees stop closed also watches done,
//     since its request may have come after the goroutine's last look.
//   - The requests on the hot path (allow, peek, reset, refund, a batch, a
//     wait and its leaving, a batch of tries) are a closed set of messages.
//     Every other message is a function that the goroutine runs on its
//     state between two requests (Do), so an administrative operation is
//     written in one place, by its caller. After it, the partition
//     re-decides the lines of the keys whose policies the table says it
//     changed (Table.Changed), and no other, so a function that changes
//     nothing (Stats, PoliciesOf) costs the same however many callers
//     wait.
//   - Code the partition does not own is supervised: the table meets a
//     panic in a rule (see Table), and the goroutine a panic in
//     the Clock, which fails the requests that came with that reading. The
//     partition and its other keys go on.
//   - Callers waiting on a key (WaitN) wait in the key's line, in the
//     partition, answered on their reply channels when their turn comes;
//     one timer from the Clock wakes the partition for the earliest line
//     due, and is read only while a line exists, so a partition nobody
//     waits on reads its mailbox alone. A line that is due is served
//     before anything is decided after it, whether or not the timer has
//     fired yet, so a request at its RetryAfter finds the line ahead of
//     it served. A caller that stops waiting sends a leave message and
//     waits for its answer (wait.go the caller's side, waiting.go the
//     lines, lines.go serving them, timer.go the timer). A wait started
//     with StartWait is a waiter like the others, whose caller does not
//     block on its reply channel: once the answer is in it, the partition
//     sends its Ticket on the channel the caller gave, never waiting for
//     room there (ticket.go).
//   - Idle keys expire a few at a time, after each burst of messages has
//     been answered (the table's Expire, with a budget that grows with the
//     burst), so a million keys becoming idle at once never stall the
//     partition. A key expires a grace period after it becomes idle, so
//     that one used every few moments keeps its memory.
//   - The goroutine's own state lives apart from what callers read, so its
//     writes never make callers' cache lines bounce.
package actor

import (
	"context"
	"sync"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/supervise"
	"github.com/chanlimit/chanlimit/internal/topk"
)

// Expiry: after each burst of messages the table may do expireBase steps
// of expiring work, plus expirePerRequest for each request in the burst
// (each item of a batch counts). A request adds at most two steps of work
// (its key, new, expires once; a later deadline is caught up with once),
// so expiring keeps pace, a few steps at a time, and never stalls.
//
// A key expires once it has been idle for grace: a key that comes back
// within it keeps its slot and its state's memory, so a key used more
// often than that costs no allocation even if its state is untouched
// between uses (a generous limit). A new key that needs room under
// MaxKeys takes the place of an idle key at once, grace or not.
const (
	expireBase       = 8
	expirePerRequest = 2
	grace            = time.Second
)

// Kind is the kind of a message. The set is closed: each kind has a
// method on Partition that sends it, and one method of the loop that
// serves it (serve.go).
type Kind uint8

const (
	KindAllow Kind = iota + 1
	KindPeek
	KindReset
	KindRefund // give n units back to key's policies
	KindBatch
	KindTry   // a batch of WaitN requests, each granted now or left to wait (lines.go)
	KindDo    // run do on the partition's state
	KindWait  // grant n units on key, in line with the key's other waiters (lines.go)
	KindLeave // take the waiter whose reply channel this is out of key's line
	KindStop  // sent by Stop: answer what is queued, then exit
	KindHold  // keep key from being granted anything for a while (Holder)
)

// Message is one message in a mailbox, sent by value: a kind, and what
// that kind needs. It fits in 64 bytes, a cache line. A loop of another
// package reads it through its methods (server.go).
type Message struct {
	kind  Kind
	key   string
	n     int
	reply chan reply

	// arg is what the kind needs beside key and n, if anything:
	//   - *Quota: KindAllow, KindPeek, KindWait (WaitQuota): where to write the
	//     key's quota with the answer (fillQuota);
	//   - *[]Item: KindBatch, KindTry: decided in order, answered in place;
	//   - func(*State) error: KindDo;
	//   - *Ticket: KindWait (StartWait), KindLeave: rung once its reply is
	//     sent (ticket.go);
	//   - time.Duration: KindHold, how long to hold key (a Hold is rare: the
	//     word of a server that refused, so its boxing costs nothing that
	//     matters, and the message stays a cache line).
	arg any

	// deadline is the caller's ctx's, as time since epoch, or 0: none
	// (deadlineOf). A wait is refused at once if it would come after it
	// (wait; Budget), and a loop of another package reads it (Deadline).
	deadline time.Duration
}

// Quota returns where the answer writes the key's quota (AllowQuota,
// PeekQuota, WaitQuota), or nil.
func (req *Message) Quota() *Quota { q, _ := req.arg.(*Quota); return q }

// Items returns the items of a KindBatch or a KindTry, or nil: each is
// answered in place, before the message itself is.
func (req *Message) Items() *[]Item { b, _ := req.arg.(*[]Item); return b }

// Hold returns how long a KindHold holds its key.
func (req *Message) Hold() time.Duration { d, _ := req.arg.(time.Duration); return d }

// ticket returns req's Ticket, or nil: a WaitN's.
func (req *Message) ticket() *Ticket { t, _ := req.arg.(*Ticket); return t }

// epoch is the instant requests' deadlines count from: a reading of the
// process's monotonic clock, on which contexts' deadlines are kept too.
var epoch = clock.Real().Now()

// deadlineOf returns ctx's deadline as time since epoch, or 0 if it has
// none (a deadline at epoch itself is a nanosecond later). It saturates:
// a deadline centuries away is the largest Duration, never a wrapped one.
func deadlineOf(ctx context.Context) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	if d := dl.Sub(epoch); d != 0 {
		return d
	}
	return 1
}

// Budget returns the time left until the deadline of the caller's
// context, at least 0, or -1 if it has none: a wait's budget. It is on
// the clock contexts keep their deadlines on, whatever the partition's
// Clock.
func (req *Message) Budget() time.Duration {
	if req.deadline == 0 {
		return -1
	}
	if since := clock.Real().Since(epoch); req.deadline > since {
		return req.deadline - since
	}
	return 0
}

// reply is the answer to one request.
type reply struct {
	d   algorithms.Decision
	err error
}

// State is a partition's state, lent to a function that Do runs between
// two requests. The function must not keep any of it.
type State struct {
	Table Table         // the partition's keys
	Now   time.Duration // the partition's now: time since Start, never going back

	// Wall is the time of day Now stands for, as the clock counted it: its
	// reading at Start plus the time it has counted since, which a step of
	// the clock's time of day after Start does not move (see ReadClock).
	Wall time.Time

	// ClockErr is the error of the reading of the clock that came with
	// this message, if it failed; Now and Wall are then those of the
	// latest reading that worked.
	ClockErr error

	Counts Counts // of the answers delivered so far

	Waiting int // WaitN calls in line on the partition's keys

	clock   clock.Clock
	calling calling            // the code the goroutine is in that it does not own, if it may end the goroutine
	denied  *topk.Denials      // the keys denied: AllowN's, a batch's items', WaitN's refused at once (apart: a few KB; made at the first)
	by      map[string]*uint64 // the denials by the policy that decided them (Decision.Policy)
	lastBy  string             // the policy of the last denial counted in by, and its count there
	lastN   *uint64
	staged  []denial // the denials of an answer about to be sent, counted once it is
}

// denial is a denial of key by policy, whose answer is about to be sent.
type denial struct{ key, policy string }

// MaxPolicyNames is the most policy names a partition counts denials of
// one by one (EachPolicyDenied): a denial by a name past them counts
// under OtherPolicies, so that names that come and go (overrides') never
// grow a partition without end.
const MaxPolicyNames = 256

// OtherPolicies is the name the denials of the policies past
// MaxPolicyNames names count under.
const OtherPolicies = "other"

// EachPolicyDenied calls f with the name of each policy that decided
// denials (Decision.Policy), and how many, as Counts.Denied counts them:
// at most MaxPolicyNames names, and OtherPolicies.
func (s *State) EachPolicyDenied(f func(policy string, denied uint64)) {
	for policy, n := range s.by {
		f(policy, *n)
	}
}

// Tick sets Now to now, a reading of the partition's clock, and moves the
// count of the keys denied on to it: a loop calls it with each reading.
func (s *State) Tick(now time.Duration) {
	s.Now = now
	if s.denied != nil {
		s.denied.Tick(now)
	}
}

// EachDenied calls f with each key the partition has counted denials of
// (as Counts.Denied counts them) in the last one to two minutes of its
// timeline (internal/topk: at most 128 keys, every key with more than
// 1/64 of a minute's denials among them), its count, and how much that
// count may overestimate by: count-err <= the true count <= count.
func (s *State) EachDenied(f func(key string, count, err uint64)) {
	if s.denied != nil {
		s.denied.Each(f)
	}
}

// ReadClock returns the clock's reading now, its time of day, for a
// function that needs one besides Wall: a clock's time of day can be set,
// and then the two differ. The reading is supervised: a panic is counted,
// and returned as an error wrapping ErrClockPanic.
func (s *State) ReadClock() (time.Time, error) {
	var t time.Time
	s.calling = callingClock
	err := supervise.Call(ErrClockPanic, func() { t = s.clock.Now() })
	s.calling = callingNone
	if err != nil {
		s.Counts.ClockPanics++
	}
	return t, err
}

// ExitedInClock reports whether ReadClock was under way, and clears the
// mark: a loop of another package (server.go) asks it when its goroutine
// ends, to tell a runtime.Goexit in the clock from one in a rule. (This
// package's loop reads the mark itself.)
func (s *State) ExitedInClock() bool {
	in := s.calling == callingClock
	s.calling = callingNone
	return in
}

// calling says what code the goroutine does not own it is in, for when
// that code ends the goroutine (see carryOn).
type calling uint8

const (
	callingNone  calling = iota // the table (which notes the rule it asks) or nothing
	callingTick                 // the clock, for the reading of a burst
	callingClock                // the clock, for a function run by Do
)

// Counts are what a partition counts itself: the answers it delivered (a
// batch's items one by one), and the panics of its Clock. A request whose
// caller gave up before its answer counts nowhere, and neither does a
// Peek.
type Counts struct {
	Allowed     uint64 // decisions that allowed
	Denied      uint64 // decisions that denied
	Refused     uint64 // requests refused with ErrTooManyKeys
	WouldDeny   uint64 // decisions a dry-run policy would have denied (Decision.WouldDeny)
	ClockPanics uint64 // readings of the Clock that panicked
}

// Partition is one goroutine and the keys it owns. Its methods are safe for
// simultaneous use by many goroutines.
type Partition struct {
	mailbox  chan Message
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	replies  sync.Pool // of chan reply, each with a buffer of one
	loop     *loop     // touched only by the partition goroutine
}

// loop is the partition goroutine's own state.
type loop struct {
	state      State
	d          algorithms.Decision // a waiter's decision, for schedule to read: a pointer to it passed on escapes, and this one is on the heap already
	scratch    algorithms.Decision // where the table decides a single request (peek): likewise on the heap already
	keys       keys                // the table, with what it can do (table.go)
	timeline   Timeline            // the clock's readings, and the lines' timer
	inflight   inflight            // the request being served, until it is answered
	stopping   bool                // the stop message has come: drain, then exit
	unfinished unfinished          // what a goroutine that ended left undone, for the next (carry_on.go)
	waits      waiting             // the lines of callers waiting on keys (waiting.go, lines.go)
}

// inflight is what the goroutine must know of the request it serves to
// answer it, if code it does not own ends the goroutine (carry_on.go).
type inflight struct {
	reply  chan reply // nil: none
	ticket *Ticket    // its ticket, if it is a wait's (ring)
	kind   Kind
	batch  *[]Item
	refund int // a batch's refund mark: the items before it are still to be given back, latest first
}

// Start starts the goroutine of a partition that owns table, reads the time
// from clk, taking origin (a reading of clk) as the start of its timeline,
// and queues up to mailboxSize requests (at least 0). A key's line of
// waiters (WaitN) holds at most maxWaiters; 0 means no cap. Start itself
// calls neither the table nor the clock.
func Start(table Table, clk clock.Clock, origin time.Time, mailboxSize, maxWaiters int) *Partition {
	p := newPartition(table, clk, origin, mailboxSize)
	p.loop.waits.max = max(maxWaiters, 0)
	go p.run()
	return p
}

// newPartition returns a partition whose goroutine is not started.
func newPartition(table Table, clk clock.Clock, origin time.Time, mailboxSize int) *Partition {
	p := &Partition{
		mailbox: make(chan Message, max(mailboxSize, 0)),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		loop:    &loop{state: NewState(table, clk, origin), timeline: NewTimeline(clk, origin)},
	}
	p.replies.New = func() any { return make(chan reply, 1) }
	p.loop.keys = keysOf(table)
	return p
}
