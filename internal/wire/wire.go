// Package wire reads the varint fields of chanlimit's snapshot format, for
// the router (the format's frame) and the algorithms (each key's state).
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrTruncated is the error of a read past the end of the input.
var ErrTruncated = errors.New("truncated")

// Reader reads fields from Src, remembering the first error in Err; after
// an error every read returns zero, so a caller reads all its fields and
// checks once.
type Reader struct {
	Src []byte
	Err error
}

// Fail records err, unless an error is recorded already.
func (r *Reader) Fail(err error) {
	if r.Err == nil {
		r.Err = err
	}
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 { return read(r, binary.Uvarint) }

// Varint reads a signed varint.
func (r *Reader) Varint() int64 { return read(r, binary.Varint) }

func read[T uint64 | int64](r *Reader, decode func([]byte) (T, int)) T {
	if r.Err != nil {
		return 0
	}
	v, k := decode(r.Src)
	if k <= 0 {
		r.Fail(ErrTruncated)
		return 0
	}
	r.Src = r.Src[k:]
	return v
}

// Bytes reads a uvarint length and that many bytes, which alias Src.
func (r *Reader) Bytes() []byte {
	n := r.Uvarint()
	if r.Err != nil {
		return nil
	}
	if n > uint64(len(r.Src)) {
		r.Fail(fmt.Errorf("%w: a length of %d with %d bytes left", ErrTruncated, n, len(r.Src)))
		return nil
	}
	b := r.Src[:n]
	r.Src = r.Src[n:]
	return b
}

// AppendBytes appends b with its length before it, as Bytes reads it.
func AppendBytes(dst, b []byte) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(b))), b...)
}

// AppendString appends s as AppendBytes does.
func AppendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}
