package block

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"path/filepath"
	"strconv"
)

// On-disk layout (see README.md): <Dir>/v1/<h[0:2]>/<h>/<index>, where h is
// the hex objID of (StoreID, Key, Version, Size, BlockSize) and index the
// block number in decimal. A block file holds the block's bytes at offset 0
// followed by a trailer. Temporary files are <Dir>/v1/<h[0:2]>/<h>/.tmp.*.
const (
	layoutDir    = "v1"
	tmpPrefix    = ".tmp."
	trailerMagic = "FRYBLK01"
	maxChunks    = 64 // verified-chunk bitmaps are one uint64
	trailerHead  = 48 // magic 8, obj 16, index 8, data length 8, chunk size 4, chunk count 4
)

// castagnoli is the CRC32C table (hardware accelerated on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt marks a block whose trailer or checksum does not match.
var errCorrupt = errors.New("block: corrupt cache block")

// objID names one object version (with the block size it is cut in).
type objID [16]byte

// blockID names one block of one object version.
type blockID struct {
	obj objID
	idx int64
}

// object is one object version as the cache sees it. It is immutable.
type object struct {
	id      objID
	ref     Ref
	dir     string // directory of its block files
	bs      int64  // block size
	chunk   int64  // checksum chunk size
	nblocks int64
}

func newObject(root string, bs int64, ref Ref) *object {
	h := sha256.New()
	for _, s := range []string{layoutDir, ref.StoreID, ref.Key, ref.Version, strconv.FormatInt(ref.Size, 10), strconv.FormatInt(bs, 10)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	var id objID
	copy(id[:], h.Sum(nil))
	hx := hexID(id)
	return &object{
		id:      id,
		ref:     ref,
		dir:     filepath.Join(root, layoutDir, hx[:2], hx),
		bs:      bs,
		chunk:   chunkSize(bs),
		nblocks: (max(ref.Size, 0) + bs - 1) / bs,
	}
}

// chunkSize is the checksum granularity of blocks of size bs: 64 KiB, or
// bs/64 rounded up to 4 KiB for blocks above 4 MiB.
func chunkSize(bs int64) int64 {
	if bs <= maxChunks*(64<<10) {
		return min(bs, 64<<10)
	}
	c := (bs + maxChunks - 1) / maxChunks
	return (c + 4095) / 4096 * 4096
}

// blockLen is the number of object bytes in block idx.
func (o *object) blockLen(idx int64) int64 {
	return min(o.bs, o.ref.Size-idx*o.bs)
}

func (o *object) path(idx int64) string {
	return filepath.Join(o.dir, itoa(idx))
}

func hexID(id objID) string { return hex.EncodeToString(id[:]) }

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

func (o *object) bid(idx int64) blockID { return blockID{obj: o.id, idx: idx} }

// nChunks is the number of checksum chunks of a block of n bytes.
func nChunks(n, chunk int64) int { return int((n + chunk - 1) / chunk) }

// trailerLen is the size of the trailer of a block of n bytes.
func trailerLen(n, chunk int64) int64 { return trailerHead + 4*int64(nChunks(n, chunk)) + 4 }

// appendTrailer appends the trailer of block id (n bytes, chunk CRCs crcs).
func appendTrailer(b []byte, id blockID, n, chunk int64, crcs []uint32) []byte {
	start := len(b)
	b = append(b, trailerMagic...)
	b = append(b, id.obj[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(id.idx))
	b = binary.LittleEndian.AppendUint64(b, uint64(n))
	b = binary.LittleEndian.AppendUint32(b, uint32(chunk))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(crcs)))
	for _, c := range crcs {
		b = binary.LittleEndian.AppendUint32(b, c)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// parseTrailer checks a trailer read from block id of n bytes and returns
// its chunk CRCs; any mismatch is errCorrupt.
func parseTrailer(t []byte, id blockID, n, chunk int64) ([]uint32, error) {
	want := trailerLen(n, chunk)
	if int64(len(t)) != want {
		return nil, errCorrupt
	}
	body, sum := t[:want-4], binary.LittleEndian.Uint32(t[want-4:])
	if crc32.Checksum(body, castagnoli) != sum || string(body[:8]) != trailerMagic ||
		[16]byte(body[8:24]) != id.obj ||
		int64(binary.LittleEndian.Uint64(body[24:])) != id.idx ||
		int64(binary.LittleEndian.Uint64(body[32:])) != n ||
		int64(binary.LittleEndian.Uint32(body[40:])) != chunk ||
		int(binary.LittleEndian.Uint32(body[44:])) != nChunks(n, chunk) {
		return nil, errCorrupt
	}
	crcs := make([]uint32, nChunks(n, chunk))
	for i := range crcs {
		crcs[i] = binary.LittleEndian.Uint32(body[trailerHead+4*i:])
	}
	return crcs, nil
}

// parseBlockPath recovers a block's identity from its path relative to
// <Dir>/v1 ("ab/ab…/17"); ok is false for anything else.
func parseBlockPath(objHex, name string) (blockID, bool) {
	var id blockID
	if len(objHex) != 2*len(id.obj) {
		return id, false
	}
	if _, err := hex.Decode(id.obj[:], []byte(objHex)); err != nil {
		return id, false
	}
	idx, err := strconv.ParseInt(name, 10, 64)
	if err != nil || idx < 0 || strconv.FormatInt(idx, 10) != name {
		return id, false
	}
	id.idx = idx
	return id, true
}

// chunkCRC accumulates the chunk CRCs of a block as its bytes stream by.
type chunkCRC struct {
	chunk int64
	pos   int64 // bytes seen
	cur   uint32
	crcs  []uint32
}

func (c *chunkCRC) reset(chunk int64) {
	*c = chunkCRC{chunk: chunk, crcs: c.crcs[:0]}
}

func (c *chunkCRC) write(p []byte) {
	for len(p) > 0 {
		room := c.chunk - c.pos%c.chunk
		k := min(int64(len(p)), room)
		c.cur = crc32.Update(c.cur, castagnoli, p[:k])
		c.pos += k
		p = p[k:]
		if k == room {
			c.crcs = append(c.crcs, c.cur)
			c.cur = 0
		}
	}
}

// sums returns the CRCs of all chunks, the last one possibly partial.
func (c *chunkCRC) sums() []uint32 {
	if c.pos%c.chunk != 0 {
		return append(c.crcs, c.cur)
	}
	return c.crcs
}
