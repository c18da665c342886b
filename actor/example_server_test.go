package actor_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
)

// A partition's caller side, served by a loop of your own (Open): here a
// loop that grants every other AllowN on a key, refuses every other kind
// of message, and on the stop message answers what is queued and exits.
// (A router on a Store is served so, by a loop that makes round trips.)
func Example_server() {
	p, srv := actor.Open(8)
	go func() {
		granted := map[string]int{}
		for {
			msg := <-srv.Mailbox()
			switch msg.Kind() {
			case actor.KindAllow:
				granted[msg.Key()]++
				msg.Answer(algorithms.Decision{Allowed: granted[msg.Key()]%2 == 1}, nil)
			case actor.KindStop:
				for {
					select {
					case msg := <-srv.Mailbox():
						msg.Answer(algorithms.Decision{}, actor.ErrClosed)
					default:
						srv.Exit() // every message has its answer
						return
					}
				}
			default:
				msg.Answer(algorithms.Decision{}, errors.ErrUnsupported)
			}
		}
	}()

	ctx := context.Background()
	for range 3 {
		d, err := p.AllowN(ctx, "k", 1)
		fmt.Println(d.Allowed, err)
	}
	_, err := p.PeekN(ctx, "k", 1)
	fmt.Println(err)
	p.Stop()
	<-p.Done()
	_, err = p.AllowN(ctx, "k", 1)
	fmt.Println(err)
	// Output:
	// true <nil>
	// false <nil>
	// true <nil>
	// unsupported operation
	// chanlimit: router closed
}
