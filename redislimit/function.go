package redislimit

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// How the store calls decide.lua: as a Redis Function (FCALL), where
// Redis has them (Redis 7 and later), else as a script (EVALSHA).
//
// A script is run whole at every call: its ~50 functions are made again
// each time, which costs more than a single key's decision. A Function's
// library is loaded once, and its functions are made once. The library
// is named after the script's hash, so that instances running different
// versions of redislimit (a rolling deploy) each call their own; each
// version leaves its library in Redis (FUNCTION DELETE removes one, and
// a store whose library is gone loads it again).
//
// The store loads the library when a call finds it missing (a new node,
// a restart without persistence, FUNCTION FLUSH), on every master of a
// Cluster, and sends the call again: Redis ran nothing of a call that
// found no function. A Redis that refuses FUNCTION LOAD (before 7.0, or
// a user its ACL does not let call or load functions) makes the store
// use scripts from then on.

// callKind is how a call is sent.
type callKind uint8

const (
	byFunction callKind = iota // FCALL
	byHash                     // EVALSHA
	byScript                   // EVAL, with the script itself
)

// decideLibrary is decide.lua's library: its header, the file less its
// last line, and the registration of decideCall in its place; and
// decideFunction the name decideCall is registered under.
var decideLibrary, decideFunction = library(decideLua, decideScript.Hash())

// library returns the library made of the script src, whose hash is
// hash, and the name of its function. It panics if src does not end by
// calling decideCall, as decide.lua does (TestLibrary).
func library(src, hash string) (code, function string) {
	const last = "return decideCall(KEYS, ARGV)"
	body, ok := strings.CutSuffix(strings.TrimRight(src, " \t\r\n"), last) // whatever line ends a checkout gave the file
	if !ok {
		panic("redislimit: decide.lua does not end with " + last)
	}
	name := "chanlimit_" + hash[:16]
	function = name + "_decide"
	return "#!lua name=" + name + "\n" + body + "redis.register_function('" + function + "', decideCall)\n", function
}

// isNoFunction reports whether err, an FCALL's, says that Redis has no
// such function (the call ran nothing: its library is to load).
func isNoFunction(err error) bool { return redis.HasErrorPrefix(err, "Function not found") }

// noFCALL reports whether err, an FCALL's or a FUNCTION LOAD's, says that
// Redis has no functions (before 7.0), or will not let this client call
// or load them (its ACL): Redis refused the command before running
// anything, and will again. (A NOPERM for the call's keys names no
// command: a script would be refused them too.)
func noFCALL(err error) bool {
	if redis.HasErrorPrefix(err, "unknown command") {
		return true
	}
	if !redis.HasErrorPrefix(err, "NOPERM") {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "'fcall'") || strings.Contains(msg, "'function|load'") || strings.Contains(msg, "'function'")
}

// loadLibrary loads decide.lua's library on Redis: on every master of a
// Cluster, on every shard of a Ring. A library Redis has already is
// loaded. It returns a redis.Error if Redis refused to load it.
func (s *Store) loadLibrary(ctx context.Context) error {
	load := func(ctx context.Context, c *redis.Client) error {
		return loaded(c.FunctionLoad(ctx, decideLibrary).Err())
	}
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, load)
	case *redis.Ring:
		return c.ForEachShard(ctx, load)
	}
	return loaded(s.client.FunctionLoad(ctx, decideLibrary).Err())
}

// loaded returns FUNCTION LOAD's error, nil if the library was there.
func loaded(err error) error {
	if redis.HasErrorPrefix(err, "Library") && strings.HasSuffix(err.Error(), "already exists") {
		return nil
	}
	return err
}

// noFunctions notes, if err says Redis has no functions for this client
// (noFCALL), that the store calls scripts from now on. Any other error
// (a failed round trip, OOM, LOADING, a read-only replica) is for a
// moment: the next call that finds no function loads the library again.
func (s *Store) noFunctions(err error) {
	if noFCALL(err) {
		s.scripts.Store(true)
	}
}
