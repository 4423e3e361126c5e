package ublkguest

import (
	"encoding/binary"
	"fmt"
	"time"
)

// BlockSize is the size of every write the Writer issues.
const BlockSize = 4096

// Write is one block write the Writer issued and how it ended.
type Write struct {
	Off   int64     // byte offset on the device
	Tag   uint32    // the Pattern tag of its content
	Start time.Time // when the write was issued
	End   time.Time // when it returned
	Err   error     // nil when the device acknowledged it
}

// Pattern returns the content the Writer writes at byte offset off: the
// offset and a tag repeated, so a block that lands in the wrong place, or
// a stale or torn block, never matches.
func Pattern(off int64, tag uint32) []byte {
	b := make([]byte, BlockSize)
	for i := 0; i < BlockSize; i += 16 {
		binary.LittleEndian.PutUint64(b[i:], uint64(off))
		binary.LittleEndian.PutUint32(b[i+8:], tag)
		binary.LittleEndian.PutUint32(b[i+12:], uint32(i))
	}
	return b
}

// VerifyAcked checks disk, the device's content read after the teardown
// (its backing file), against writes: every acknowledged block must hold
// its pattern. Failed writes may or may not have landed and are not
// checked; a Writer never writes a block twice. It returns one error per
// bad block.
func VerifyAcked(disk []byte, writes []Write) []error {
	var errs []error
	for _, w := range writes {
		if w.Err != nil {
			continue
		}
		if w.Off+BlockSize > int64(len(disk)) {
			errs = append(errs, fmt.Errorf("acknowledged write at %d is beyond the disk (%d bytes)", w.Off, len(disk)))
			continue
		}
		want := Pattern(w.Off, w.Tag)
		got := disk[w.Off : w.Off+BlockSize]
		if string(got) != string(want) {
			errs = append(errs, fmt.Errorf("acknowledged write at %d lost: block starts %x", w.Off, got[:16]))
		}
	}
	return errs
}
