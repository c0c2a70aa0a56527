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

// On-disk layout (see README.md): <Dir>/v2/<h[0:2]>/<h>/<segment>, where h
// is the hex objID of (StoreID, Key, Version, Size, BlockSize, segment
// blocks) and segment the segment number in decimal. A segment file holds
// up to maxSegBlocks consecutive blocks: a header page (identity, then one
// record per block with its chunk CRCs), then the blocks at fixed offsets.
// A block is present when its record is valid; absent blocks are holes.
const (
	layoutDir    = "v2"
	segMagic     = "FRYSEG02"
	recMagic     = 0x314b4c42 // "BLK1"
	segHeadLen   = 64         // magic 8, obj 16, segment 8, block size 8, blocks 4, chunk 4, CRC 4, zero pad
	maxChunks    = 64         // verified-chunk bitmaps are one uint64
	maxSegBlocks = 64         // presence bitmaps are one uint64
	pageSize     = 4096
)

// errCorrupt marks a block whose record or checksum does not match.
var errCorrupt = errors.New("block: corrupt cache block")

// castagnoli is the CRC32C table (hardware accelerated on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// objID names one object version (with the geometry it is stored in).
type objID [16]byte

// segID names one segment file.
type segID struct {
	obj objID
	seg int64
}

// blockID names one block of one object version.
type blockID struct {
	obj objID
	idx int64
}

// object is one object version as the cache sees it. It is immutable.
type object struct {
	id        objID
	ref       Ref
	dir       string // directory of its segment files
	bs        int64  // block size
	chunk     int64  // checksum chunk size
	segBlocks int64  // blocks per segment file
	recLen    int64  // bytes per block record
	hdrLen    int64  // offset of block 0 in a segment file
	nblocks   int64
}

func newObject(root string, bs, segBlocks int64, ref Ref) *object {
	h := sha256.New()
	for _, s := range []string{layoutDir, ref.StoreID, ref.Key, ref.Version,
		itoa(ref.Size), itoa(bs), itoa(segBlocks)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	var id objID
	copy(id[:], h.Sum(nil))
	hx := hexID(id)
	chunk := chunkSize(bs)
	recLen := 12 + 4*int64(nChunks(bs, chunk))
	return &object{
		id:        id,
		ref:       ref,
		dir:       filepath.Join(root, layoutDir, hx[:2], hx),
		bs:        bs,
		chunk:     chunk,
		segBlocks: segBlocks,
		recLen:    recLen,
		hdrLen:    (segHeadLen + segBlocks*recLen + pageSize - 1) / pageSize * pageSize,
		nblocks:   (max(ref.Size, 0) + bs - 1) / bs,
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

func (o *object) sid(seg int64) segID { return segID{obj: o.id, seg: seg} }

func (o *object) segPath(seg int64) string { return filepath.Join(o.dir, itoa(seg)) }

// dataOff is the offset of slot b's bytes in a segment file.
func (o *object) dataOff(b int64) int64 { return o.hdrLen + b*o.bs }

// recOff is the offset of slot b's record in a segment file.
func (o *object) recOff(b int64) int64 { return segHeadLen + b*o.recLen }

// segHeader is the identity header of segment seg.
func (o *object) segHeader(seg int64) []byte {
	b := make([]byte, 0, segHeadLen)
	b = append(b, segMagic...)
	b = append(b, o.id[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(seg))
	b = binary.LittleEndian.AppendUint64(b, uint64(o.bs))
	b = binary.LittleEndian.AppendUint32(b, uint32(o.segBlocks))
	b = binary.LittleEndian.AppendUint32(b, uint32(o.chunk))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return b[:segHeadLen]
}

// record encodes the record of slot b of segment seg: n data bytes with
// chunk CRCs crcs. Its CRC also covers the slot's identity, so a record
// copied elsewhere does not validate.
func (o *object) record(seg, b, n int64, crcs []uint32) []byte {
	r := make([]byte, o.recLen)
	binary.LittleEndian.PutUint32(r, recMagic)
	binary.LittleEndian.PutUint32(r[4:], uint32(n))
	for i, c := range crcs {
		binary.LittleEndian.PutUint32(r[8+4*i:], c)
	}
	end := 8 + 4*len(crcs)
	binary.LittleEndian.PutUint32(r[end:], o.recCRC(seg, b, r[:end]))
	return r
}

func (o *object) recCRC(seg, b int64, body []byte) uint32 {
	var id [32]byte
	copy(id[:], o.id[:])
	binary.LittleEndian.PutUint64(id[16:], uint64(seg))
	binary.LittleEndian.PutUint64(id[24:], uint64(b))
	return crc32.Update(crc32.Checksum(id[:], castagnoli), castagnoli, body)
}

// parseRecord returns the chunk CRCs of slot b of segment seg (n bytes).
// ok is false for an absent or invalid record; bad tells them apart (an
// all-zero record is simply absent).
func (o *object) parseRecord(r []byte, seg, b, n int64) (crcs []uint32, ok, bad bool) {
	k := nChunks(n, o.chunk)
	end := 8 + 4*k
	if int64(len(r)) != o.recLen {
		return nil, false, true
	}
	if binary.LittleEndian.Uint32(r) == 0 {
		return nil, false, false
	}
	if binary.LittleEndian.Uint32(r) != recMagic || int64(binary.LittleEndian.Uint32(r[4:])) != n ||
		binary.LittleEndian.Uint32(r[end:]) != o.recCRC(seg, b, r[:end]) {
		return nil, false, true
	}
	crcs = make([]uint32, k)
	for i := range crcs {
		crcs[i] = binary.LittleEndian.Uint32(r[8+4*i:])
	}
	return crcs, true, false
}

// parseSegPath recovers a segment's identity from its directory and file
// names; ok is false for anything else.
func parseSegPath(objHex, name string) (segID, bool) {
	var id segID
	if len(objHex) != 2*len(id.obj) {
		return id, false
	}
	if _, err := hex.Decode(id.obj[:], []byte(objHex)); err != nil {
		return id, false
	}
	seg, err := strconv.ParseInt(name, 10, 64)
	if err != nil || seg < 0 || itoa(seg) != name {
		return id, false
	}
	id.seg = seg
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
