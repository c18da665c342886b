package chanlimit_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// TestRestoreOfVeryManyPolicies: a snapshot that names 60,000 policies
// (1.4 MB, its checksum right) is refused as taken under other policies.
// (Their names are checked in linear time: a quadratic check took 26s
// here under -race, holding every administrative call back meanwhile; no
// unit test asserts a time, so a regression shows as a slow test.)
func TestRestoreOfVeryManyPolicies(t *testing.T) {
	const n = 60_000
	b := binary.AppendUvarint([]byte("chanlimit snapshot\n"), 3)
	b = binary.AppendUvarint(b, n)
	for i := range n {
		b = wireString(b, fmt.Sprint("p", i))
		b = wireString(b, "token_bucket")
		b = binary.AppendUvarint(binary.AppendUvarint(binary.AppendUvarint(b, 1), uint64(time.Second)), 0)
	}
	b = binary.AppendUvarint(b, 0) // no section
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
	err := r.Restore(bg, bytes.NewReader(b))
	require.ErrorIs(t, err, chanlimit.ErrBadSnapshot)
	assert.ErrorContains(t, err, "taken under policies")
}

func wireString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}
