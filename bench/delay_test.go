package bench

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// A Redis across a network, on one machine: with REDIS_DELAY set (a Go
// duration, say 250us), the Redis benchmarks reach Redis through a proxy
// on 127.0.0.1 that holds every chunk of bytes, each way, that long
// before passing it on, in the order they came. So a round trip takes at
// least twice REDIS_DELAY more, as across a network, and many can be out
// at once, as across one; what the proxy costs the CPUs is small beside
// Redis's own. Run, say:
//
//	../.ci/redis bash -c 'cd bench && REDIS_DELAY=250us go test -run "^$" \
//	  -bench "BenchmarkRedisCost/impl=(chanlimit|redis_rate)/callers=(1|8|64)$" -benchtime 10000x .'

var delayed struct {
	once sync.Once
	addr string
	err  error
}

// delayedAddr returns the address of the proxy to to, started once, that
// delays each chunk by delay each way.
func delayedAddr(b *testing.B, to string, delay time.Duration) string {
	delayed.once.Do(func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			delayed.err = err
			return
		}
		delayed.addr = ln.Addr().String()
		go func() {
			for {
				in, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					out, err := net.Dial("tcp", to)
					if err != nil {
						_ = in.Close()
						return
					}
					go pass(out, in, delay)
					pass(in, out, delay)
				}()
			}
		}()
	})
	if delayed.err != nil {
		b.Fatal(delayed.err)
	}
	return delayed.addr
}

// pass copies what it reads from from to to, each chunk delay after it
// came, until from ends; then it closes to.
func pass(to, from net.Conn, delay time.Duration) {
	type chunk struct {
		b   []byte
		due time.Time
	}
	chunks := make(chan chunk, 4096)
	go func() {
		defer to.Close()
		for c := range chunks {
			time.Sleep(time.Until(c.due)) // the network this proxy plays, on the wall clock: no limiter's time
			if _, err := to.Write(c.b); err != nil {
				for range chunks { // drain: the reader ends with from
				}
				return
			}
		}
	}()
	defer close(chunks)
	for {
		buf := make([]byte, 64<<10)
		n, err := from.Read(buf)
		if n > 0 {
			chunks <- chunk{buf[:n], time.Now().Add(delay)}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = from.Close()
			}
			return
		}
	}
}

// redisDelay returns REDIS_DELAY, or 0 if it is not set.
func redisDelay(b *testing.B) time.Duration {
	s := os.Getenv("REDIS_DELAY")
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		b.Fatalf("REDIS_DELAY is %q: not a duration of 0 or more", s)
	}
	return d
}
