package lincheck

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// A part no call of which can come first is the one the story tells.
// Before, it was skipped (porcupine has no partial order for it), and a
// violation named no key.
func TestStoryOfAPartWithNoFirstCall(t *testing.T) {
	m, err := NewModel(PolicySets()["token_bucket"], Options{})
	require.NoError(t, err)
	ops := []porcupine.Operation{
		{ClientId: 0, Input: Input{Kind: Allow, Key: "k", N: 1}, Output: Output{D: chanlimit.Decision{Allowed: false}}, Call: 0, Return: 1},
	}
	res := Verdict(m, ops, time.Minute)
	require.Equal(t, porcupine.Illegal, res.CheckResult)
	assert.Equal(t, "k", res.Key)
	assert.Contains(t, res.Story, `key "k": 0 of its 1 operations fit an order`)
}
