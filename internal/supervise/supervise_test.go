package supervise

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errCulprit = errors.New("culprit")

func TestCallReturnsNilWhenFReturns(t *testing.T) {
	ran := false
	require.NoError(t, Call(errCulprit, func() { ran = true }))
	assert.True(t, ran)
}

func TestCallTurnsAPanicIntoAnError(t *testing.T) {
	tests := []struct {
		name  string
		give  any
		want  string
		match error // besides errCulprit
	}{
		{"String", "boom", "culprit: boom", nil},
		{"Error", fs.ErrNotExist, "culprit: file does not exist", fs.ErrNotExist},
		{"Int", 42, "culprit: 42", nil},
		{"Nil", nil, "culprit: panic called with nil argument", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Call(errCulprit, func() { panic(tt.give) })
			require.ErrorIs(t, err, errCulprit)
			assert.Equal(t, tt.want, err.Error())
			if tt.match != nil {
				assert.ErrorIs(t, err, tt.match)
			}
		})
	}
}

func TestCallMeetsRuntimeErrors(t *testing.T) {
	var m map[string]int
	err := Call(errCulprit, func() { m["k"] = 1 })
	require.ErrorIs(t, err, errCulprit)
	var re runtime.Error
	assert.ErrorAs(t, err, &re, "the runtime's error is found too")
}

// TestCallMeetsAPanicOfNilThatRecoversAsNil: with GODEBUG=panicnil=1,
// recover returns nil for panic(nil); it is a panic all the same. (The
// setting is the process's: this test sets and restores it.)
func TestCallMeetsAPanicOfNilThatRecoversAsNil(t *testing.T) {
	t.Setenv("GODEBUG", "panicnil=1")
	err := Call(errCulprit, func() { panic(nil) })
	require.ErrorIs(t, err, errCulprit)
	assert.True(t, Panicked(err))
}

// TestPanickedLooksAtTheErrorAlone: a panic's value whose Is panics is
// never asked.
func TestPanickedLooksAtTheErrorAlone(t *testing.T) {
	err := Call(errCulprit, func() { panic(touchy{}) })
	assert.True(t, Panicked(err))
	assert.False(t, Panicked(touchy{}))
	assert.False(t, Panicked(nil))
	assert.False(t, Panicked(fmt.Errorf("wrapped: %w", err)), "err itself only")
}

// touchy is an error whose Is panics.
type touchy struct{}

func (touchy) Error() string { return "touchy" }
func (touchy) Is(error) bool { panic("Is asked") }

// boom is an error whose Error panics with itself: formatting it panics
// again inside fmt's own recovery.
type boom struct{}

func (boom) Error() string { panic(boom{}) }

// TestMessagesNeverCallIntoTheValueAgain: the message of a panic's error,
// and of a wrapped error, is read once, under supervision, even when
// formatting it panics twice over.
func TestMessagesNeverCallIntoTheValueAgain(t *testing.T) {
	err := Call(errCulprit, func() { panic(boom{}) })
	assert.Equal(t, "culprit: a supervise.boom, whose Error or String method panicked", err.Error())
	assert.Equal(t, "wrapped: "+err.Error(), fmt.Errorf("wrapped: %w", err).Error())

	w := Wrap(boom{})
	assert.Equal(t, "a supervise.boom, whose Error or String method panicked", w.Error())
	assert.ErrorIs(t, fmt.Errorf("x: %w", Wrap(fs.ErrNotExist)), fs.ErrNotExist)
	assert.Equal(t, "file does not exist", Wrap(fs.ErrNotExist).Error())
	assert.NoError(t, Wrap(nil))
}
