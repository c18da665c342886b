package redislimit_test

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// proxy is a TCP proxy on 127.0.0.1 in front of a Redis server, for the
// faults a network makes: it holds requests or replies until released,
// delays replies, swallows them, and cuts its connections. Its delays
// are the network's, on the wall clock: they move no limiter's time.
type proxy struct {
	t        testing.TB
	ln       net.Listener
	upstream string
	wg       sync.WaitGroup
	done     chan struct{}

	mu    sync.Mutex // guards conns
	conns map[net.Conn]bool

	requests, replies gate          // while held, the bytes going that way wait
	delay             atomic.Int64  // each reply waits this long (ns)
	swallow           atomic.Bool   // replies are lost, with all that follows them on their connection
	refuse            atomic.Bool   // new connections are closed at once
	asked             chan struct{} // a token each time bytes of a request come from a client
	replied           chan struct{} // a token each time bytes of a reply come from the server
	dropped           chan struct{} // a token each time bytes of a reply are swallowed
}

// gate holds bytes while it is shut.
type gate struct{ shut atomic.Pointer[chan struct{}] }

// hold shuts g: bytes wait until open.
func (g *gate) hold() {
	ch := make(chan struct{})
	g.shut.Store(&ch)
}

// open lets the bytes held, and those to come, go.
func (g *gate) open() {
	if ch := g.shut.Swap(nil); ch != nil {
		close(*ch)
	}
}

// wait returns once g is open, or done is closed.
func (g *gate) wait(done <-chan struct{}) {
	if ch := g.shut.Load(); ch != nil {
		select {
		case <-*ch:
		case <-done:
		}
	}
}

// newProxy starts a proxy to upstream, stopped with t.
func newProxy(t testing.TB, upstream string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{t: t, ln: ln, upstream: upstream, done: make(chan struct{}), conns: map[net.Conn]bool{}, asked: make(chan struct{}, 1), replied: make(chan struct{}, 1), dropped: make(chan struct{}, 1)}
	p.wg.Go(p.accept)
	t.Cleanup(p.stop)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, u) {
			return
		}
		p.wg.Go(func() { p.pump(u, c, &p.requests, false) })
		p.wg.Go(func() { p.pump(c, u, &p.replies, true) })
	}
}

// track keeps c and u, to cut; it reports false if the proxy is stopped.
func (p *proxy) track(c, u net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		c.Close()
		u.Close()
		return false
	default:
	}
	p.conns[c], p.conns[u] = true, true
	return true
}

// pump copies from to to, through g; replies may be delayed or
// swallowed. A connection a reply was swallowed on delivers no reply
// after it, as a real one would not: TCP delivers its bytes in order or
// not at all, so that a client whose reply was lost times out, and never
// reads a later reply as the lost one's. It closes both once either ends.
func (p *proxy) pump(to, from net.Conn, g *gate, reply bool) {
	defer to.Close()
	defer from.Close()
	buf := make([]byte, 32<<10)
	lost := false // a reply was swallowed: the rest of the stream is lost too
	for {
		n, err := from.Read(buf)
		if n > 0 {
			tokens := p.asked
			if reply {
				tokens = p.replied
			}
			select {
			case tokens <- struct{}{}:
			default:
			}
			g.wait(p.done)
			if reply {
				if d := time.Duration(p.delay.Load()); d > 0 {
					select {
					case <-time.After(d): // the network's delay, on the wall clock
					case <-p.done:
						return
					}
				}
				if lost = lost || p.swallow.Load(); lost {
					select {
					case p.dropped <- struct{}{}:
					default:
					}
					continue
				}
			}
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// drain takes the tokens of asked and replied: what comes after it gives
// new ones.
func (p *proxy) drain() {
	for _, ch := range []chan struct{}{p.asked, p.replied} {
		select {
		case <-ch:
		default:
		}
	}
}

// cut closes every connection the proxy has: the clients' see them reset.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// stop closes the proxy and waits for its goroutines.
func (p *proxy) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	close(p.done)
	p.ln.Close()
	p.requests.open()
	p.replies.open()
	p.cut()
	p.wg.Wait()
}

// TestProxySwallowLosesTheRestOfTheConnection checks that the proxy's
// lost replies are a network's: on the connection one was lost on, no
// later reply comes, so that a client never reads it as the lost one's;
// a new connection works.
func TestProxySwallowLosesTheRestOfTheConnection(t *testing.T) {
	px := newProxy(t, env(t, "REDIS_ADDR"))
	echo := func(s string) []byte { return []byte("*2\r\n$4\r\nECHO\r\n$1\r\n" + s + "\r\n") }
	c, err := net.Dial("tcp", px.addr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })

	px.swallow.Store(true)
	_, err = c.Write(echo("a"))
	require.NoError(t, err)
	<-px.dropped
	px.swallow.Store(false)
	_, err = c.Write(echo("b"))
	require.NoError(t, err)
	// What comes on c, if anything: b's reply would be read as a's.
	require.NoError(t, c.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	require.Error(t, err, "read %q on the connection a reply was lost on", buf[:n])
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "the read ends by its deadline: %v", err)

	d, err := net.Dial("tcp", px.addr())
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	_, err = d.Write(echo("c"))
	require.NoError(t, err)
	require.NoError(t, d.SetReadDeadline(time.Now().Add(10*time.Second)))
	got := make([]byte, len("$1\r\nc\r\n"))
	_, err = io.ReadFull(d, got)
	require.NoError(t, err)
	require.Equal(t, "$1\r\nc\r\n", string(got))
}
