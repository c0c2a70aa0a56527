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

func TestSegmentRecords(t *testing.T) {
	ref := Ref{StoreID: "s3/b", Key: "k", Version: "v", Size: 10<<20 + 5}
	o := newObject("/c", 1<<20, 4, ref)
	if o.hdrLen%pageSize != 0 || o.hdrLen < segHeadLen+4*o.recLen {
		t.Fatalf("header length %d", o.hdrLen)
	}
	if h := o.segHeader(2); len(h) != segHeadLen {
		t.Fatalf("header is %d bytes", len(h))
	}
	crcs := make([]uint32, 16)
	for i := range crcs {
		crcs[i] = uint32(i * 77)
	}
	rec := o.record(1, 3, 1<<20, crcs)
	got, ok, bad := o.parseRecord(rec, 1, 3, 1<<20)
	if !ok || bad || len(got) != 16 || got[5] != crcs[5] {
		t.Fatalf("parseRecord = %v, %v, %v", got, ok, bad)
	}
	flipped := append([]byte(nil), rec...)
	flipped[20] ^= 1
	tests := []struct {
		name      string
		rec       []byte
		seg, b, n int64
		bad       bool
	}{
		{name: "absent", rec: make([]byte, o.recLen), seg: 1, b: 3, n: 1 << 20},
		{name: "other slot", rec: rec, seg: 1, b: 2, n: 1 << 20, bad: true},
		{name: "other segment", rec: rec, seg: 2, b: 3, n: 1 << 20, bad: true},
		{name: "other length", rec: rec, seg: 1, b: 3, n: 5, bad: true},
		{name: "flipped bit", rec: flipped, seg: 1, b: 3, n: 1 << 20, bad: true},
		{name: "short", rec: rec[:10], seg: 1, b: 3, n: 1 << 20, bad: true},
	}
	for _, tt := range tests {
		if _, ok, bad := o.parseRecord(tt.rec, tt.seg, tt.b, tt.n); ok || bad != tt.bad {
			t.Errorf("%s: ok %v bad %v, want bad %v", tt.name, ok, bad, tt.bad)
		}
	}
}

func TestParseSegPath(t *testing.T) {
	o := newObject("/c", 1<<20, 16, Ref{StoreID: "s3/b", Key: "k", Version: "v", Size: 10})
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
		id, ok := parseSegPath(tt.obj, tt.name)
		if ok != tt.ok || ok && id.obj != o.id {
			t.Errorf("parseSegPath(%q, %q) = %v, %v", tt.obj, tt.name, id, ok)
		}
	}
	ids := map[objID]string{}
	for name, ob := range map[string]*object{
		"v1":        newObject("/c", 1<<20, 16, Ref{Key: "k", Version: "v1"}),
		"v2":        newObject("/c", 1<<20, 16, Ref{Key: "k", Version: "v2"}),
		"2MiB":      newObject("/c", 2<<20, 16, Ref{Key: "k", Version: "v1"}),
		"8 per seg": newObject("/c", 1<<20, 8, Ref{Key: "k", Version: "v1"}),
		"size":      newObject("/c", 1<<20, 16, Ref{Key: "k", Version: "v1", Size: 1}),
	} {
		if other, dup := ids[ob.id]; dup {
			t.Errorf("%s and %s share an object id", name, other)
		}
		ids[ob.id] = name
	}
}
