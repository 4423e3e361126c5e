package logbuf

import (
	"bytes"
	"sync"
)

// A Buffer is a bytes.Buffer safe for concurrent use. The zero value is
// an empty Buffer ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A Signal is a log destination that closes Seen once a write holds its
// text: a test acts when the code under test has logged that it reached a
// point, not after a guessed delay. Make one with NewSignal.
type Signal struct {
	want []byte
	seen chan struct{}
	once sync.Once
}

// NewSignal returns a Signal for the text want.
func NewSignal(want string) *Signal {
	return &Signal{want: []byte(want), seen: make(chan struct{})}
}

// Write looks for the text in p (one write is one log line); it never
// fails.
func (l *Signal) Write(p []byte) (int, error) {
	if bytes.Contains(p, l.want) {
		l.once.Do(func() { close(l.seen) })
	}
	return len(p), nil
}

// Seen is closed once a write held the text.
func (l *Signal) Seen() <-chan struct{} { return l.seen }
