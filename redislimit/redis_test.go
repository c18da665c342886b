package redislimit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The tests run against real Redis servers, which .ci/redis starts: they
// fail, rather than skip, when its servers are not there.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env returns the environment variable .ci/redis sets, failing t without
// it.
func env(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run these tests through .ci/redis, which starts the Redis servers they need (see README)", name)
	}
	return v
}

// single returns a client of the single node, closed with t.
func single(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: env(t, "REDIS_ADDR")})
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.Ping(context.Background()).Err(), "the single node at REDIS_ADDR")
	return c
}

// cluster returns a client of the Cluster, closed with t.
func cluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(env(t, "REDIS_CLUSTER_ADDRS"), ",")})
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.Ping(context.Background()).Err(), "the Cluster at REDIS_CLUSTER_ADDRS")
	return c
}

// clientOf returns a client of the Cluster if name is "cluster", and
// otherwise of the single node, closed with t.
func clientOf(t testing.TB, name string) redis.UniversalClient {
	t.Helper()
	if name == "cluster" {
		return cluster(t)
	}
	return single(t)
}

// prefix returns a Prefix no other test uses.
func prefix(t testing.TB) string {
	return fmt.Sprintf("test:%s:%d:", t.Name(), rand.Uint64())
}

// server is a redis-server of a test's own, to stop and start again.
type server struct {
	t    testing.TB
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

// newServer starts a redis-server on a free port of 127.0.0.1, with args
// (redis-server options) if any, stopped with t.
func newServer(t testing.TB, args ...string) *server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	s := &server{t: t, port: port, dir: t.TempDir(), args: args}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// start starts the server, and returns once it answers.
func (s *server) start() {
	s.t.Helper()
	args := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--save", "", "--appendonly", "no", "--dir", s.dir}, s.args...)
	s.cmd = exec.Command(env(s.t, "REDIS_SERVER"), args...)
	require.NoError(s.t, s.cmd.Start())
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	for range 200 {
		if c.Ping(context.Background()).Err() == nil {
			return
		}
		time.Sleep(10 * time.Millisecond) // the server starting: not the limiter's time
	}
	s.t.Fatalf("redis-server on %s did not answer", s.addr())
}

// stop stops the server, by its PID, and waits for it to exit.
func (s *server) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}
