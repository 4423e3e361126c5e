package keepaliveclose

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
)

// A Listener accepts the connections of the listener it wraps and closes
// each when data arrives on it after the server wrote on it, without
// handing that data on. Make one with Wrap.
type Listener struct {
	net.Listener
	dropped atomic.Int64

	mu      sync.Mutex
	methods map[string]int // the dropped requests, by method
}

// Wrap returns a Listener over ln.
func Wrap(ln net.Listener) *Listener { return &Listener{Listener: ln} }

// Accept waits for the next connection of the wrapped listener and
// returns it wrapped.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, ln: l}, nil
}

// Dropped returns how many times a connection closed on data that arrived
// after an answer: the requests sent on a kept-alive connection.
func (l *Listener) Dropped() int64 { return l.dropped.Load() }

// DroppedMethod returns how many of the dropped requests had the method
// m (the first word of what arrived): a client may send a GET on a
// kept-alive connection, which net/http sends again itself when the
// connection closes under it, and must not send a POST there.
func (l *Listener) DroppedMethod(m string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.methods[m]
}

// drop counts the request that starts with data as dropped.
func (l *Listener) drop(data []byte) {
	method, _, _ := strings.Cut(string(data), " ")
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.methods == nil {
		l.methods = map[string]int{}
	}
	l.methods[method]++
	l.dropped.Add(1)
}

// conn is one connection of a Listener.
type conn struct {
	net.Conn
	answered atomic.Bool
	ln       *Listener
}

func (c *conn) Write(p []byte) (int, error) {
	c.answered.Store(true)
	return c.Conn.Write(p)
}

// Read hands the server what arrives until it has written on the
// connection; then what arrives is not handed on: the connection closes,
// as a keep-alive timeout firing then closes it, and the server's read
// fails as on a connection closed under it.
func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.answered.Load() {
		c.ln.drop(p[:n])
		_ = c.Conn.Close()
		return 0, net.ErrClosed
	}
	return n, err
}
