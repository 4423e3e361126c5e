//go:build linux

package ublkguest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Writer writes blocks in a loop to a block device, as a VMM's guest does,
// with O_DIRECT so that a write returns only once the device (the ublk
// server) acknowledged it. It writes each block of its region once, in
// order, and ends at its first error, the end of the region, or Stop.
type Writer struct {
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	writes []Write
	first  chan struct{} // closed after the first acknowledged write
}

// StartWriter opens path and starts writing Pattern(off, tag) blocks from
// byte offset from to to.
func StartWriter(path string, from, to int64, tag uint32) (*Writer, error) {
	f, buf, err := openDirect(path, os.O_RDWR)
	if err != nil {
		return nil, err
	}
	w := &Writer{stop: make(chan struct{}), done: make(chan struct{}), first: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer f.Close()
		defer unix.Munmap(buf)
		w.loop(f, buf, from, to, tag)
	}()
	return w, nil
}

// openDirect opens path with O_DIRECT, so that I/O goes to the device and
// returns only once the device answered, and maps the page-aligned
// BlockSize buffer that O_DIRECT I/O needs. The caller closes the file and
// unmaps the buffer.
func openDirect(path string, flag int) (*os.File, []byte, error) {
	f, err := os.OpenFile(path, flag|unix.O_DIRECT, 0)
	if err != nil {
		return nil, nil, err
	}
	buf, err := unix.Mmap(-1, 0, BlockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, buf, nil
}

func (w *Writer) loop(f *os.File, buf []byte, from, to int64, tag uint32) {
	for off := from; off+BlockSize <= to; off += BlockSize {
		select {
		case <-w.stop:
			return
		default:
		}
		copy(buf, Pattern(off, tag))
		rec := Write{Off: off, Tag: tag, Start: time.Now()}
		_, rec.Err = f.WriteAt(buf, off)
		rec.End = time.Now()
		w.mu.Lock()
		w.writes = append(w.writes, rec)
		acked := len(w.writes)
		w.mu.Unlock()
		if rec.Err != nil {
			return
		}
		if acked == 1 {
			close(w.first)
		}
	}
}

// Started is closed once the first write was acknowledged.
func (w *Writer) Started() <-chan struct{} { return w.first }

// Done is closed when the writer has ended (error, end of region, Stop).
func (w *Writer) Done() <-chan struct{} { return w.done }

// Stop ends the loop after the write under way and returns every write,
// or ctx's error when that write does not return in time.
func (w *Writer) Stop(ctx context.Context) ([]Write, error) {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("writer: a write is still in flight: %w", ctx.Err())
	}
	return w.Writes(), nil
}

// Writes returns the writes so far.
func (w *Writer) Writes() []Write {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Write(nil), w.writes...)
}
