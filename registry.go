package chanlimit

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/keytable"
)

// The algorithms Config.Algorithm can name: the built-in rules, and those
// given to Register. Registration lives here, beside the router, because
// the router keeps each key's state inline in its tables, so it must make
// a table for each state type; the state type is known where a rule is
// registered, and the rules' package does not know the tables.

// maker makes a registered algorithm's rule for Params, or says why it
// cannot.
type maker func(algorithms.Params) (keytable.Rule, error)

// registry maps names to makers. It is replaced whole, never changed in
// place, so a lookup needs no lock.
var registry atomic.Pointer[map[string]maker]

func init() {
	registry.Store(&map[string]maker{
		DefaultAlgorithm:                    makerOf[algorithms.TokenBucketState](algorithms.NewTokenBucket),
		algorithms.GCRAName:                 makerOf[algorithms.GCRAState](algorithms.NewGCRA),
		algorithms.LeakyBucketName:          makerOf[algorithms.GCRAState](algorithms.NewLeakyBucket),
		algorithms.SlidingWindowLogName:     makerOf[algorithms.SlidingWindowLogState](algorithms.NewSlidingWindowLog),
		algorithms.FixedWindowName:          makerOf[algorithms.FixedWindowState](algorithms.NewFixedWindow),
		algorithms.SlidingWindowCounterName: makerOf[algorithms.SlidingWindowCounterState](algorithms.NewSlidingWindowCounter),
	})
}

// Register makes the rule that newMachine builds available under name, for
// Config.Algorithm. S is the state the rule keeps per key, whose zero
// value is a key never seen; New calls newMachine with the Config's Limit,
// Window and Burst, and refuses the Config, with ErrInvalidConfig and
// newMachine's error, if newMachine returns one (or panics).
//
// The router gives the rule everything else: a state per key, kept while
// the key is not idle, the cap on keys, supervision, and batches. If the
// Machine is also an algorithms.Expiring, its idle keys are told exactly;
// if it is also an algorithms.StateCodec, its keys can be saved with
// Snapshot and Restore; if it is also an algorithms.Adopter, it converts
// a key's state when the Params of its policy change (SetPolicies,
// SetOverride), where the state is otherwise kept as it is.
//
// Register may be called at any time, though init is the usual place. It
// refuses an empty name, a nil newMachine, and, with
// ErrDuplicateAlgorithm, a name already registered.
func Register[S any, M algorithms.Machine[S]](name string, newMachine func(algorithms.Params) (M, error)) error {
	if name == "" || newMachine == nil {
		return fmt.Errorf("chanlimit: Register needs a name and a constructor (got name %q, nil constructor %t)", name, newMachine == nil)
	}
	mk := makerOf[S](newMachine)
	for {
		old := registry.Load()
		if _, taken := (*old)[name]; taken {
			return fmt.Errorf("%w: %q", ErrDuplicateAlgorithm, name)
		}
		next := maps.Clone(*old)
		next[name] = mk
		if registry.CompareAndSwap(old, &next) {
			return nil
		}
	}
}

// makerOf returns the maker of the rule newMachine builds.
func makerOf[S any, M algorithms.Machine[S]](newMachine func(algorithms.Params) (M, error)) maker {
	return func(p algorithms.Params) (keytable.Rule, error) {
		m, err := newMachine(p)
		if err != nil {
			return nil, err
		}
		if isNil(m) {
			return nil, fmt.Errorf("the constructor returned a nil Machine (%T)", m)
		}
		return keytable.NewRule[S](m), nil
	}
}

// isNil reports whether v is nil: a nil interface, or a nil pointer, map,
// slice, func or channel, whose methods would likely fail on every call.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// RegisteredAlgorithms returns the names Config.Algorithm accepts, sorted.
func RegisteredAlgorithms() []string {
	return slices.Sorted(maps.Keys(*registry.Load()))
}

// lookup returns the maker registered under name, or an error wrapping
// both ErrUnknownAlgorithm and ErrInvalidConfig that lists the names there
// are. where prefixes the field in the error.
func lookup(where, name string) (maker, error) {
	if mk, ok := (*registry.Load())[name]; ok {
		return mk, nil
	}
	return nil, &unknownError{where: where, name: name, registered: RegisteredAlgorithms()}
}

// unknownError is an unknown algorithm name: a bad config of its own kind.
type unknownError struct {
	where      string
	name       string
	registered []string
}

func (e *unknownError) Error() string {
	return fmt.Sprintf("%v: %sAlgorithm: %q is not registered (registered: %s)",
		ErrInvalidConfig, e.where, e.name, strings.Join(e.registered, ", "))
}

func (e *unknownError) Unwrap() []error { return []error{ErrInvalidConfig, ErrUnknownAlgorithm} }
