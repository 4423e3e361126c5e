package frame

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// MaxSize bounds a frame's body, so a corrupt length cannot make a reader
// allocate gigabytes.
const MaxSize = 1 << 20

// Write writes v as JSON preceded by its 4-byte big-endian length, in one
// Write call.
func Write(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	_, err = w.Write(append(buf, b...))
	return err
}

// Read reads one frame and decodes its JSON body into v. A length above
// MaxSize is an error and nothing more is read.
func Read(r io.Reader, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxSize {
		return fmt.Errorf("frame: %d bytes exceeds the %d-byte limit", n, MaxSize)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
