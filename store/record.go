package store

import (
	"bufio"
	"encoding/binary"
	"hash/crc32"
	"io"
	"os"
)

// The log format; see the package comment.
const (
	logMagic     = "acprlog1"
	logHeaderLen = 16 // magic + nonce
	recHeaderLen = 8  // body length + CRC-32C of the body
	maxBody      = 1 + MaxLineBytes
)

// Record types.
const (
	recStart  byte = 'S'
	recUpdate byte = 'U'
	recEnd    byte = 'E'
	recGap    byte = 'G'
	recTrim   byte = 'D'
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendRecord appends a record whose CRC is still zero: computing it is left
// to the writer (sealRecords), off the relay path.
func appendRecord(b []byte, typ byte, payload []byte) []byte {
	n := len(b)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0, typ)
	binary.LittleEndian.PutUint32(b[n:], uint32(1+len(payload)))
	return append(b, payload...)
}

// sealRecords fills in the CRCs of the records appendRecord wrote.
func sealRecords(b []byte) {
	for len(b) > 0 {
		n := binary.LittleEndian.Uint32(b)
		body := b[recHeaderLen : recHeaderLen+int(n)]
		binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(body, castagnoli))
		b = b[recHeaderLen+int(n):]
	}
}

// sealedRecord returns one complete record.
func sealedRecord(typ byte, payload []byte) []byte {
	b := appendRecord(nil, typ, payload)
	sealRecords(b)
	return b
}

func newHeader(nonce uint64) []byte {
	return binary.LittleEndian.AppendUint64([]byte(logMagic), nonce)
}

func validType(t byte) bool {
	switch t {
	case recStart, recUpdate, recEnd, recGap, recTrim:
		return true
	}
	return false
}

// parseRecords calls fn for each valid record of data (a log without its
// header) and returns where the valid records end: at the first record that
// is truncated, fails its checksum or is not one of ours. scanLog must agree.
func parseRecords(data []byte, fn func(typ byte, payload []byte)) int {
	off := 0
	for len(data)-off >= recHeaderLen {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		sum := binary.LittleEndian.Uint32(data[off+4:])
		if n < 1 || n > maxBody || n > len(data)-off-recHeaderLen {
			break
		}
		body := data[off+recHeaderLen : off+recHeaderLen+n]
		if !validType(body[0]) || crc32.Checksum(body, castagnoli) != sum {
			break
		}
		fn(body[0], body[1:])
		off += recHeaderLen + n
	}
	return off
}

// scanLog is parseRecords over f[start:size] without holding the records in
// memory: it returns the end of the valid records and calls fn (if not nil)
// with the offset and type of each.
func scanLog(f *os.File, start, size int64, fn func(off int64, typ byte)) (int64, error) {
	r := bufio.NewReaderSize(io.NewSectionReader(f, start, size-start), 256<<10)
	var hdr [recHeaderLen + 1]byte
	off := start
	for size-off >= recHeaderLen+1 {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return off, err
		}
		n := int64(binary.LittleEndian.Uint32(hdr[:]))
		sum := binary.LittleEndian.Uint32(hdr[4:])
		if n < 1 || n > maxBody || n > size-off-recHeaderLen || !validType(hdr[8]) {
			break
		}
		// The body's checksum from the reader's buffer, in place (an
		// io.CopyN would allocate a buffer per record).
		crc := crc32.Update(0, castagnoli, hdr[8:])
		for rem := n - 1; rem > 0; {
			if r.Buffered() == 0 {
				if _, err := r.Peek(1); err != nil {
					if err == io.EOF {
						err = io.ErrUnexpectedEOF
					}
					return off, err
				}
			}
			k := int(min(rem, int64(r.Buffered())))
			chunk, _ := r.Peek(k)
			crc = crc32.Update(crc, castagnoli, chunk)
			r.Discard(k)
			rem -= int64(k)
		}
		if crc != sum {
			break
		}
		if fn != nil {
			fn(off, hdr[8])
		}
		off += recHeaderLen + n
	}
	return off, nil
}

// replay is what a log holds for the editor.
type replay struct {
	updates [][]byte
	trimmed bool // older turns were trimmed
	partial bool // some updates were not stored
}

// readRecords turns a log's records into the updates to replay: chain is
// its segments' records, oldest first (readChain). An update is skipped
// from a gap or a trim record up to the next turn start: the turn it
// belongs to was cut short or lost its beginning, and what is left of it
// must not be shown (replay never starts mid-turn, never shows an update
// without its tool call). A segment's link to the one read before it is no
// trim; a link after a segment whose records end early (damaged) is a gap.
// The returned slices alias chain.
func readRecords(chain ...[]byte) replay {
	var rp replay
	skipping := false
	whole := false // the segment before ended with a whole record
	for i, data := range chain {
		if _, size, ok := parseLink(data); ok && i > 0 {
			// ... where the link says it ends.
			if !whole || int64(logHeaderLen+len(chain[i-1])) != size {
				skipping, rp.partial = true, true
			}
			data = data[linkLen:]
		}
		end := parseRecords(data, func(typ byte, payload []byte) {
			switch typ {
			case recStart:
				skipping = false
			case recGap:
				skipping, rp.partial = true, true
			case recTrim:
				skipping, rp.trimmed = true, true
			case recUpdate:
				if !skipping {
					rp.updates = append(rp.updates, payload)
				}
			}
		})
		whole = end == len(data)
	}
	return rp
}
