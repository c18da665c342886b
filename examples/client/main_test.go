package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chanlimit/chanlimit/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestClientKeepsTheServersPace: on a fake clock that moves only while the
// client waits for its turn, every request ends 200, none refused to the
// caller; the server refuses the first (its quota spent by the
// neighbour), which is sent again a second later, at the end of the hold
// its Retry-After set, and three more wait out a hold the RateLimit field
// set. The client, allowed 10 a second by its own router, keeps the
// server's 2 a second: 8 requests in 4 s.
func TestClientKeepsTheServersPace(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	moved := make(chan struct{})
	go func() { // a tenth of a second at a time, each time the client waits
		defer close(moved)
		for clk.BlockUntilContext(ctx, 1) == nil {
			clk.Advance(100 * time.Millisecond)
		}
	}()
	var out strings.Builder
	rep, err := run(ctx, clk, &out)
	cancel()
	<-moved
	require.NoError(t, err)
	t.Log("\n" + out.String())

	assert.Equal(t, report{
		requests:      requests,
		ok:            requests,
		refused:       0,
		serverRefused: 1,
		held:          3,
		took:          4 * time.Second,
	}, rep)
	assert.Contains(t, out.String(), "#1 again")
}
