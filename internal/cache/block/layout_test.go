package block

import (
	"hash/crc32"
	"path/filepath"
	"strings"
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

func TestRecords(t *testing.T) {
	ref := Ref{StoreID: "s3/b", Key: "k", Version: "v", Size: 10<<20 + 5}
	o := newObject("/c", 1<<20, ref)
	if h := o.idxHeader(); len(h) != idHeadLen || idHeadLen > sealOff || sealOff+sealLen > idxHdrLen {
		t.Fatalf("header is %d bytes, seal at %d+%d, records at %d", len(h), sealOff, sealLen, idxHdrLen)
	}
	if o.nblocks != 11 || o.blockLen(10) != 5 {
		t.Fatalf("nblocks %d, last block %d bytes", o.nblocks, o.blockLen(10))
	}
	crcs := make([]uint32, 16)
	for i := range crcs {
		crcs[i] = uint32(i * 77)
	}
	rec := o.record(3, 1<<20, crcs)
	got, ok, bad := o.parseRecord(rec, 3, 1<<20)
	if !ok || bad || len(got) != 16 || got[5] != crcs[5] {
		t.Fatalf("parseRecord = %v, %v, %v", got, ok, bad)
	}
	flipped := append([]byte(nil), rec...)
	flipped[20] ^= 1
	other := newObject("/c", 1<<20, Ref{StoreID: "s3/b", Key: "k", Version: "v2", Size: 10<<20 + 5})
	tests := []struct {
		name string
		o    *object
		rec  []byte
		idx  int64
		n    int64
		bad  bool
	}{
		{name: "absent", o: o, rec: make([]byte, o.recLen), idx: 3, n: 1 << 20},
		{name: "other block", o: o, rec: rec, idx: 2, n: 1 << 20, bad: true},
		{name: "other object", o: other, rec: rec, idx: 3, n: 1 << 20, bad: true},
		{name: "other length", o: o, rec: rec, idx: 3, n: 5, bad: true},
		{name: "flipped bit", o: o, rec: flipped, idx: 3, n: 1 << 20, bad: true},
		{name: "short", o: o, rec: rec[:10], idx: 3, n: 1 << 20, bad: true},
	}
	for _, tt := range tests {
		if _, ok, bad := tt.o.parseRecord(tt.rec, tt.idx, tt.n); ok || bad != tt.bad {
			t.Errorf("%s: ok %v bad %v, want bad %v", tt.name, ok, bad, tt.bad)
		}
	}
}

func TestParseName(t *testing.T) {
	o := newObject("/c", 1<<20, Ref{StoreID: "s3/b", Key: "k", Version: "v", Size: 10})
	hx := hexID(o.id)
	tests := []struct {
		name string
		ok   bool
	}{
		{name: hx, ok: true},
		{name: hx + goneMark + "12-3"},
		{name: hx + ".tmp"},
		{name: strings.ToUpper(hx)},
		{name: hx[:30]},
		{name: "zz" + hx[2:]},
	}
	for _, tt := range tests {
		id, ok := parseName(tt.name)
		if ok != tt.ok || ok && id != o.id {
			t.Errorf("parseName(%q) = %v, %v", tt.name, id, ok)
		}
	}
	if o.dataPath() != filepath.Join("/c", layoutDir, hx[:2], hx, dataName) || filepath.Dir(o.idxPath()) != o.dir {
		t.Errorf("paths %s, %s", o.dataPath(), o.idxPath())
	}
	ids := map[objID]string{}
	for name, ob := range map[string]*object{
		"v1":     newObject("/c", 1<<20, Ref{Key: "k", Version: "v1"}),
		"v2":     newObject("/c", 1<<20, Ref{Key: "k", Version: "v2"}),
		"2MiB":   newObject("/c", 2<<20, Ref{Key: "k", Version: "v1"}),
		"size":   newObject("/c", 1<<20, Ref{Key: "k", Version: "v1", Size: 1}),
		"store":  newObject("/c", 1<<20, Ref{StoreID: "gs/b", Key: "k", Version: "v1"}),
		"key k2": newObject("/c", 1<<20, Ref{Key: "k2", Version: "v1"}),
	} {
		if other, dup := ids[ob.id]; dup {
			t.Errorf("%s and %s share an object id", name, other)
		}
		ids[ob.id] = name
	}
}
