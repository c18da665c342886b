package wire

import (
	"encoding/binary"
	"errors"
	"testing"
)

func TestReaderRoundTrip(t *testing.T) {
	b := binary.AppendUvarint(nil, 300)
	b = binary.AppendVarint(b, -7)
	b = AppendString(b, "key")
	b = AppendBytes(b, []byte{1, 2})
	r := Reader{Src: b}
	if u, v, s, bs := r.Uvarint(), r.Varint(), string(r.Bytes()), r.Bytes(); u != 300 || v != -7 || s != "key" || len(bs) != 2 {
		t.Fatalf("read %d %d %q %v", u, v, s, bs)
	}
	if r.Err != nil || len(r.Src) != 0 {
		t.Fatalf("err %v, %d bytes left", r.Err, len(r.Src))
	}
}

func TestReaderKeepsTheFirstError(t *testing.T) {
	for _, src := range [][]byte{
		{},                           // nothing at all
		{0x80},                       // a varint cut short
		AppendString(nil, "abc")[:3], // a length past the end
	} {
		r := Reader{Src: src}
		r.Bytes()
		if !errors.Is(r.Err, ErrTruncated) {
			t.Errorf("Bytes of %x: err %v, want ErrTruncated", src, r.Err)
		}
		r.Fail(errors.New("later"))
		if r.Uvarint() != 0 || r.Varint() != 0 || r.Bytes() != nil || !errors.Is(r.Err, ErrTruncated) {
			t.Errorf("after an error, reads must give zero and keep the first error (%v)", r.Err)
		}
	}
}
