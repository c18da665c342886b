package algorithms

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
)

// Names of the built-in algorithms.
const (
	NameTokenBucket          = "token_bucket"
	NameSlidingWindowLog     = "sliding_window_log"
	NameFixedWindow          = "fixed_window"
	NameGCRA                 = "gcra"
	NameSlidingWindowCounter = "sliding_window_counter"
	NameLeakyBucket          = "leaky_bucket"
)

// Factory makes an Algorithm from Params, or says why it cannot: a Factory
// returns an error wrapping ErrInvalidConfig for Params it does not accept.
type Factory func(Params) (Algorithm, error)

// registry maps names to factories. It is replaced whole, never changed in
// place, so a lookup needs no lock.
var registry atomic.Pointer[map[string]Factory]

func init() {
	registry.Store(&map[string]Factory{
		NameTokenBucket:          keyedFactory(NewTokenBucket),
		NameSlidingWindowLog:     keyedFactory(NewSlidingWindowLog),
		NameFixedWindow:          keyedFactory(NewFixedWindow),
		NameGCRA:                 keyedFactory(NewGCRA),
		NameSlidingWindowCounter: keyedFactory(NewSlidingWindowCounter),
		NameLeakyBucket:          keyedFactory(NewLeakyBucket),
	})
}

// keyedFactory turns the constructor of a Machine into a Factory.
func keyedFactory[S any, M Machine[S]](newMachine func(Params) (M, error)) Factory {
	return func(p Params) (Algorithm, error) {
		m, err := newMachine(p)
		if err != nil {
			return nil, err
		}
		return Keyed[S](m), nil
	}
}

// ErrDuplicateName is returned by Register for a name already taken.
var ErrDuplicateName = errors.New("chanlimit: algorithm name already registered")

// Register makes f available under name, for chanlimit.Config.Algorithm. It
// is safe to call at any time, though init is the usual place. It refuses
// an empty name, a nil factory and a name already registered.
func Register(name string, f Factory) error {
	if name == "" || f == nil {
		return fmt.Errorf("chanlimit: Register needs a name and a factory (got name %q, nil factory %t)", name, f == nil)
	}
	for {
		old := registry.Load()
		if _, taken := (*old)[name]; taken {
			return fmt.Errorf("%w: %q", ErrDuplicateName, name)
		}
		next := maps.Clone(*old)
		next[name] = f
		if registry.CompareAndSwap(old, &next) {
			return nil
		}
	}
}

// Lookup returns the factory registered under name, or an error wrapping
// both ErrUnknownAlgorithm and ErrInvalidConfig that lists the names there
// are.
func Lookup(name string) (Factory, error) {
	if f, ok := (*registry.Load())[name]; ok {
		return f, nil
	}
	return nil, &unknownError{name: name, registered: Names()}
}

// unknownError is an unknown algorithm name: a bad config of its own kind.
type unknownError struct {
	name       string
	registered []string
}

func (e *unknownError) Error() string {
	return fmt.Sprintf("chanlimit: invalid config: Algorithm: %q is not registered (registered: %s)",
		e.name, strings.Join(e.registered, ", "))
}

func (e *unknownError) Unwrap() []error { return []error{ErrInvalidConfig, ErrUnknownAlgorithm} }

// Names returns the registered names, sorted.
func Names() []string {
	return slices.Sorted(maps.Keys(*registry.Load()))
}
