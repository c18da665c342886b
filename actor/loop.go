package actor

import (
	"time"
)

// The partition's goroutine: it receives a message, or a line's timer;
// reads the clock once per burst; serves the burst (serve.go); and, once
// stopped, drains.

// run is the partition's goroutine: it takes over what a goroutine
// before it left undone, then receives and serves messages until the stop
// message, and answers what is left.
func (p *Partition) run() {
	exited := false
	defer func() {
		if !exited {
			p.carryOn()
		}
	}()
	l := p.loop
	p.takeOver() // what a goroutine before this one left undone, if any
	if l.stopping {
		p.drain(l.state.Now, nil)
		exited = true
		close(p.done)
		return
	}
	for {
		req, fired := p.receive()
		if fired { // a line is due
			l.wake()
			continue
		}
		// The requests queued behind req were all sent before the clock is
		// read, so one reading serves them all: never a time before a
		// caller's send, and one clock read per burst under load.
		queued := len(p.mailbox)
		l.unfinished.first = req // until the clock is read
		now, err := l.tick()
		l.unfinished.first = Message{}
		served, stop := p.serveBurst(req, queued, now, err) // requests, a batch's items one by one
		if stop {
			l.stopping = true
			p.drain(now, err)
			exited = true
			close(p.done)
			return
		}
		if len(l.waits.due) > 0 {
			if err == nil {
				l.serveDue(now)
			}
			l.arm(l.state.Now)
		}
		// Expiring comes after the burst's answers, so no caller in it
		// waits for it.
		l.state.Table.Expire(now-grace, expireBase+expirePerRequest*served)
	}
}

// serveBurst serves req and the queued requests behind it, in order, at
// now, and reports how many requests that was (see serve), and whether the
// stop message came: the requests behind it are left in the mailbox, for
// drain.
func (p *Partition) serveBurst(req Message, queued int, now time.Duration, clockErr error) (served int, stop bool) {
	for {
		if req.kind == KindStop {
			return served, true
		}
		served += p.loop.serve(&req, now, clockErr)
		if queued == 0 {
			return served, false
		}
		req, queued = <-p.mailbox, queued-1 // there: only this goroutine receives
	}
}

// receive returns the next message in the mailbox, or that the timer of
// the lines fired first. While no line is due, it reads the mailbox
// alone.
func (p *Partition) receive() (req Message, fired bool) {
	timer := p.loop.timeline.Fired()
	if timer == nil {
		return <-p.mailbox, false
	}
	select {
	case req := <-p.mailbox:
		return req, false
	case <-timer:
		p.loop.timeline.Spent()
		return Message{}, true
	}
}

// wake serves the lines due when the timer fires, and sets it again.
func (l *loop) wake() {
	now, err := l.tick()
	if err == nil {
		l.serveDue(now)
	}
	l.arm(l.state.Now)
	l.state.Table.Expire(now-grace, expireBase)
}

// drain answers the requests still in the mailbox with the latest clock
// reading, taken before any of them, or its error, and then every waiter
// still in line with ErrClosed.
func (p *Partition) drain(now time.Duration, clockErr error) {
	l := p.loop
	for {
		select {
		case req := <-p.mailbox:
			l.serve(&req, now, clockErr)
			continue
		default:
		}
		lines := len(l.waits.due) > 0
		l.closeLines(ErrClosed)
		if !lines {
			return
		}
	}
}

// tick reads the clock once for a burst (Timeline.Tick), and returns the
// partition's now. If the clock panics, tick counts it and returns its
// error, and now stays where it was.
func (l *loop) tick() (time.Duration, error) {
	l.state.calling = callingTick
	now, err := l.timeline.Tick()
	l.state.calling = callingNone
	if err != nil {
		l.state.Counts.ClockPanics++
		return l.state.Now, err
	}
	l.state.Tick(now)
	return now, nil
}
