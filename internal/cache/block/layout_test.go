package block

import (
	"hash/crc32"
	"testing"
)

func TestChunkSize(t *testing.T) {
	tests := []struct{ bs, want int64 }{
		{bs: 64 << 10, want: 64 << 10},
		{bs: 1 << 20, want: 64 << 10},
		{bs: 4 << 20, want: 64 << 10},
		{bs: 8 << 20, want: 128 << 10},
		{bs: 64 << 20, want: 1 << 20},
		{bs: 5 << 20, want: 80 << 10},
	}
	for _, tt := range tests {
		if got := chunkSize(tt.bs); got != tt.want || nChunks(tt.bs, got) > maxChunks {
			t.Errorf("chunkSize(%d) = %d (%d chunks), want %d", tt.bs, got, nChunks(tt.bs, got), tt.want)
		}
	}
}

func TestChunkCRC(t *testing.T) {
	data := randBytes(3, 200_000)
	const chunk = 64 << 10
	var want []uint32
	for off := 0; off < len(data); off += chunk {
		want = append(want, crc32.Checksum(data[off:min(off+chunk, len(data))], castagnoli))
	}
	for _, piece := range []int{1, 1000, chunk, 100_000, len(data)} {
		var c chunkCRC
		c.reset(chunk)
		for off := 0; off < len(data); off += piece {
			c.write(data[off:min(off+piece, len(data))])
		}
		got := c.sums()
		if len(got) != len(want) {
			t.Fatalf("piece %d: %d sums, want %d", piece, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("piece %d: chunk %d differs", piece, i)
			}
		}
	}
}

func TestTrailer(t *testing.T) {
	id := blockID{obj: objID{1, 2, 3}, idx: 7}
	const n, chunk = 150_000, 64 << 10
	crcs := []uint32{1, 2, 3}
	tr := appendTrailer(nil, id, n, chunk, crcs)
	if int64(len(tr)) != trailerLen(n, chunk) {
		t.Fatalf("trailer is %d bytes, trailerLen says %d", len(tr), trailerLen(n, chunk))
	}
	got, err := parseTrailer(tr, id, n, chunk)
	if err != nil || len(got) != 3 || got[2] != 3 {
		t.Fatalf("parseTrailer = %v, %v", got, err)
	}
	other := id
	other.idx = 8
	bad := append([]byte(nil), tr...)
	bad[30] ^= 1
	tests := []struct {
		name string
		tr   []byte
		id   blockID
		n    int64
	}{
		{name: "other block", tr: tr, id: other, n: n},
		{name: "other length", tr: tr, id: id, n: n - 1},
		{name: "flipped bit", tr: bad, id: id, n: n},
		{name: "short", tr: tr[:len(tr)-1], id: id, n: n},
	}
	for _, tt := range tests {
		if _, err := parseTrailer(tt.tr, tt.id, tt.n, chunk); err != errCorrupt {
			t.Errorf("%s: err = %v, want errCorrupt", tt.name, err)
		}
	}
}

func TestParseBlockPath(t *testing.T) {
	o := newObject("/c", 1<<20, Ref{StoreID: "s3/b", Key: "k", Version: "v", Size: 10})
	hx := hexID(o.id)
	tests := []struct {
		obj, name string
		ok        bool
	}{
		{obj: hx, name: "0", ok: true},
		{obj: hx, name: "123", ok: true},
		{obj: hx, name: "0123"},
		{obj: hx, name: "-1"},
		{obj: hx, name: ".tmp.123"},
		{obj: hx[:30], name: "1"},
		{obj: "zz" + hx[2:], name: "1"},
	}
	for _, tt := range tests {
		id, ok := parseBlockPath(tt.obj, tt.name)
		if ok != tt.ok || ok && id.obj != o.id {
			t.Errorf("parseBlockPath(%q, %q) = %v, %v", tt.obj, tt.name, id, ok)
		}
	}
	if a, b := newObject("/c", 1<<20, Ref{Key: "k", Version: "v1"}), newObject("/c", 1<<20, Ref{Key: "k", Version: "v2"}); a.id == b.id {
		t.Error("two versions share an object id")
	}
	if a, b := newObject("/c", 1<<20, Ref{Key: "k"}), newObject("/c", 2<<20, Ref{Key: "k"}); a.id == b.id {
		t.Error("two block sizes share an object id")
	}
}
