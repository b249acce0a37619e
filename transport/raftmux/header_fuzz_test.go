package raftmux

import (
	"bytes"
	"testing"
)

// FuzzReadHeader: whatever bytes a connection starts with, readHeader
// returns a group id of 1 to maxGroupLen bytes or an error, never panics,
// and reads no further than the header; a header writeHeader wrote reads
// back as its group.
func FuzzReadHeader(f *testing.F) {
	var good bytes.Buffer
	if err := writeHeader(&good, "shared@n1,n2,n3"); err != nil {
		f.Fatal(err)
	}
	f.Add(good.Bytes())
	f.Add(append(good.Bytes(), "raft bytes after the header"...))
	f.Add([]byte("CRF1\x00\x00"))
	f.Add([]byte("CRF1\xff\xff"))
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		g, err := readHeader(r)
		if err != nil {
			return
		}
		if len(g) == 0 || len(g) > maxGroupLen {
			t.Fatalf("group id of %d bytes accepted", len(g))
		}
		if read := len(data) - r.Len(); read != 6+len(g) {
			t.Fatalf("read %d bytes for a header of %d", read, 6+len(g))
		}
		var again bytes.Buffer
		if err := writeHeader(&again, g); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again.Bytes(), data[:6+len(g)]) {
			t.Fatalf("header %q does not write back as it was read", data[:6+len(g)])
		}
	})
}
