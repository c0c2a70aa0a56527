package block

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"path/filepath"
	"strconv"
	"strings"
)

// On-disk layout (see README.md): each object version is a directory
// <Dir>/v3/<h[0:2]>/<h>, where h is the hex objID of (StoreID, Key,
// Version, Size, BlockSize), holding two files:
//
//	data   the object's bytes at the object's own offsets (sparse where
//	       not fetched), so that a whole one can back a passthrough open
//	index  a header page (identity, seal), then one record per block with
//	       its chunk CRCs; a block is present when its record is valid
//
// The two are opened through one descriptor of their directory, and an
// eviction renames the directory away before it removes them, so that a
// process never pairs an index with another generation's data file.
const (
	layoutDir = "v3"
	idxMagic  = "FRYIDX03"
	recMagic  = 0x314b4c42 // "BLK1"
	idHeadLen = 48         // magic 8, obj 16, size 8, block size 8, chunk 4, CRC 4
	sealOff   = 64         // the seal (seal.go) lives at this offset of the header page
	idxHdrLen = 4096       // records start here
	maxChunks = 64         // verified-chunk bitmaps are one uint64
	pageSize  = 4096
	dataName  = "data"
	idxName   = "index"
	goneMark  = ".gone-" // an evicted directory, being removed
	newMark   = ".new-"  // a directory being created, renamed into place when whole
)

// legacyDirs are layouts of earlier versions: removed at start, never read.
var legacyDirs = []string{"v2"}

// errCorrupt marks a block whose record or checksum does not match.
var errCorrupt = errors.New("block: corrupt cache block")

// castagnoli is the CRC32C table (hardware accelerated on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// objID names one object version (with the block size it is stored in).
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
	dir     string // directory of its two files
	bs      int64  // block size
	chunk   int64  // checksum chunk size
	recLen  int64  // bytes per block record
	nblocks int64
}

func newObject(root string, bs int64, ref Ref) *object {
	h := sha256.New()
	for _, s := range []string{layoutDir, ref.StoreID, ref.Key, ref.Version, itoa(ref.Size), itoa(bs)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	var id objID
	copy(id[:], h.Sum(nil))
	hx := hexID(id)
	chunk := chunkSize(bs)
	return &object{
		id:      id,
		ref:     ref,
		dir:     filepath.Join(root, layoutDir, hx[:2], hx),
		bs:      bs,
		chunk:   chunk,
		recLen:  12 + 4*int64(nChunks(bs, chunk)),
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
	return (c + pageSize - 1) / pageSize * pageSize
}

// nChunks is the number of checksum chunks of a block of n bytes.
func nChunks(n, chunk int64) int { return int((n + chunk - 1) / chunk) }

func hexID(id objID) string { return hex.EncodeToString(id[:]) }

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// blockLen is the number of object bytes in block idx.
func (o *object) blockLen(idx int64) int64 { return min(o.bs, o.ref.Size-idx*o.bs) }

func (o *object) bid(idx int64) blockID { return blockID{obj: o.id, idx: idx} }

func (o *object) dataPath() string { return filepath.Join(o.dir, dataName) }

func (o *object) idxPath() string { return filepath.Join(o.dir, idxName) }

// recOff is the offset of block idx's record in the index file.
func (o *object) recOff(idx int64) int64 { return idxHdrLen + idx*o.recLen }

// idxHeader is the identity header of the index file.
func (o *object) idxHeader() []byte {
	b := make([]byte, 0, idHeadLen)
	b = append(b, idxMagic...)
	b = append(b, o.id[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(o.ref.Size))
	b = binary.LittleEndian.AppendUint64(b, uint64(o.bs))
	b = binary.LittleEndian.AppendUint32(b, uint32(o.chunk))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// record encodes the record of block idx: n data bytes with chunk CRCs
// crcs. Its CRC also covers the block's identity, so a record copied
// elsewhere does not validate.
func (o *object) record(idx, n int64, crcs []uint32) []byte {
	r := make([]byte, o.recLen)
	binary.LittleEndian.PutUint32(r, recMagic)
	binary.LittleEndian.PutUint32(r[4:], uint32(n))
	for i, c := range crcs {
		binary.LittleEndian.PutUint32(r[8+4*i:], c)
	}
	end := 8 + 4*len(crcs)
	binary.LittleEndian.PutUint32(r[end:], o.recCRC(idx, r[:end]))
	return r
}

func (o *object) recCRC(idx int64, body []byte) uint32 {
	var id [24]byte
	copy(id[:], o.id[:])
	binary.LittleEndian.PutUint64(id[16:], uint64(idx))
	return crc32.Update(crc32.Checksum(id[:], castagnoli), castagnoli, body)
}

// parseRecord returns the chunk CRCs of block idx (n bytes) from its
// record r. ok is false for an absent or invalid record; bad tells them
// apart (an all-zero record is simply absent).
func (o *object) parseRecord(r []byte, idx, n int64) (crcs []uint32, ok, bad bool) {
	k := nChunks(n, o.chunk)
	end := 8 + 4*k
	if int64(len(r)) != o.recLen {
		return nil, false, true
	}
	if binary.LittleEndian.Uint32(r) == 0 {
		return nil, false, false
	}
	if binary.LittleEndian.Uint32(r) != recMagic || int64(binary.LittleEndian.Uint32(r[4:])) != n ||
		binary.LittleEndian.Uint32(r[end:]) != o.recCRC(idx, r[:end]) {
		return nil, false, true
	}
	crcs = make([]uint32, k)
	for i := range crcs {
		crcs[i] = binary.LittleEndian.Uint32(r[8+4*i:])
	}
	return crcs, true, false
}

// parseName recovers an object's identity from the name of its
// directory; ok is false for anything else.
func parseName(name string) (id objID, ok bool) {
	if len(name) != 2*len(id) || strings.ToLower(name) != name {
		return id, false
	}
	if _, err := hex.Decode(id[:], []byte(name)); err != nil {
		return id, false
	}
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
