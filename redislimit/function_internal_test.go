package redislimit

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// TestLibrary: decide.lua's library is the file with a library's header
// and decideCall registered in place of its last line, named after the
// script's hash (two versions of redislimit each call their own), and a
// file that does not end by calling decideCall is refused at once.
func TestLibrary(t *testing.T) {
	assert.True(t, strings.HasPrefix(decideLibrary, "#!lua name=chanlimit_"+decideScript.Hash()[:16]+"\n"))
	assert.True(t, strings.HasSuffix(decideLibrary, "redis.register_function('"+decideFunction+"', decideCall)\n"))
	assert.NotContains(t, decideLibrary, "return decideCall(KEYS, ARGV)")
	_, other := library(decideLua, strings.Repeat("0", 40))
	assert.NotEqual(t, decideFunction, other)
	assert.Panics(t, func() { library("return 1\n", decideScript.Hash()) })
}

// TestLibraryOnEveryMaster: once a call finds the library missing, the
// store loads it on every master of the Cluster, and from then on calls
// it there (FCALL), sending no script.
func TestLibraryOnEveryMaster(t *testing.T) {
	env := os.Getenv("REDIS_CLUSTER_ADDRS")
	if env == "" {
		t.Fatal("REDIS_CLUSTER_ADDRS is not set: run these tests through .ci/redis")
	}
	addrs := strings.Split(env, ",")
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { cc.Close() })
	ctx := context.Background()
	masters := make([]*redis.Client, len(addrs))
	for i, addr := range addrs {
		masters[i] = redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { masters[i].Close() })
		require.NoError(t, masters[i].FunctionFlush(ctx).Err())
	}
	s := newTestStore(t, cc)
	p := []chanlimit.Policy{{Name: "default", Algorithm: "token_bucket", Limit: 10, Window: time.Minute}}
	decide := func() {
		t.Helper()
		var ops []chanlimit.StoreOp
		for i := range 30 { // keys on every master
			ops = append(ops, chanlimit.StoreOp{Kind: chanlimit.StoreAllow, Key: fmt.Sprint("k", i), N: 1, Policies: p})
		}
		s.Decide(ctx, ops)
		for i := range ops {
			require.NoError(t, ops[i].Err)
		}
	}
	decide()
	for _, m := range masters {
		libs, err := m.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "chanlimit_*"}).Result()
		require.NoError(t, err)
		require.Len(t, libs, 1, "master %s", m.Options().Addr)
		require.NoError(t, m.ConfigResetStat(ctx).Err())
	}
	decide()
	for _, m := range masters {
		stats, err := m.Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		assert.Contains(t, stats, "cmdstat_fcall:", "master %s", m.Options().Addr)
		assert.NotContains(t, stats, "cmdstat_eval", "master %s", m.Options().Addr)
	}
	assert.False(t, s.scripts.Load())
}

// TestNoFunctionsUsesScripts: a client that may not call functions, or
// may not load them (an ACL, as a Redis before 7.0 would answer), has its
// requests decided by scripts: the first round sends them again as
// scripts, and the store sends no function from then on.
func TestNoFunctionsUsesScripts(t *testing.T) {
	admin := singleNode(t)
	ctx := context.Background()
	for _, tc := range []struct{ name, rules string }{
		{"no FCALL", "-fcall -function"},
		{"no FCALL, FUNCTION LOAD", "-fcall +function"},
		{"no FUNCTION LOAD", "+fcall -function"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, admin.FunctionFlush(ctx).Err())
			user := fmt.Sprintf("nofn%d", time.Now().UnixNano())
			args := []any{"ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all"}
			for _, r := range strings.Fields(tc.rules) {
				args = append(args, r)
			}
			require.NoError(t, admin.Do(ctx, args...).Err())
			t.Cleanup(func() { admin.Do(ctx, "ACL", "DELUSER", user) })
			c := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, Username: user, Password: "pw"})
			t.Cleanup(func() { c.Close() })
			s := newTestStore(t, c)
			p := []chanlimit.Policy{{Name: "default", Algorithm: "fixed_window", Limit: 3, Window: time.Minute}}
			for i := range 4 {
				ops := []chanlimit.StoreOp{{Kind: chanlimit.StoreAllow, Key: "k", N: 1, Policies: p}}
				s.Decide(ctx, ops)
				require.NoError(t, ops[0].Err)
				assert.Equal(t, i < 3, ops[0].Decision.Allowed, "request %d", i)
			}
			assert.True(t, s.scripts.Load(), "scripts from the first round on")
		})
	}
}

// TestLoadRefusedForAMoment: a FUNCTION LOAD that fails for a moment (a
// Redis out of memory) leaves the store on functions: once Redis has
// room again, the next call that finds no function loads the library.
// Before, any error of FUNCTION LOAD made the store use scripts for good.
func TestLoadRefusedForAMoment(t *testing.T) {
	c := singleNode(t)
	ctx := context.Background()
	require.NoError(t, c.FunctionFlush(ctx).Err())
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1").Err())
	t.Cleanup(func() { c.ConfigSet(ctx, "maxmemory", "0") })
	s := newTestStore(t, c)
	p := []chanlimit.Policy{{Name: "default", Algorithm: "fixed_window", Limit: 3, Window: time.Minute}}
	ops := []chanlimit.StoreOp{{Kind: chanlimit.StoreAllow, Key: "k", N: 1, Policies: p}}
	s.Decide(ctx, ops) // FUNCTION LOAD is refused: OOM
	assert.False(t, s.scripts.Load(), "out of memory is for a moment")
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "0").Err())
	ops = []chanlimit.StoreOp{{Kind: chanlimit.StoreAllow, Key: "k", N: 1, Policies: p}}
	s.Decide(ctx, ops)
	require.NoError(t, ops[0].Err)
	assert.False(t, s.scripts.Load())
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "chanlimit_*"}).Result()
	require.NoError(t, err)
	assert.Len(t, libs, 1, "loaded once Redis had room")
}
