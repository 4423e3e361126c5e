package keepaliveclose

import (
	"net"
	"sync/atomic"
)

// A Listener accepts the connections of the listener it wraps and closes
// each when data arrives on it after the server wrote on it, without
// handing that data on. Make one with Wrap.
type Listener struct {
	net.Listener
	dropped atomic.Int64
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
	return &conn{Conn: c, dropped: &l.dropped}, nil
}

// Dropped returns how many times a connection closed on data that arrived
// after an answer: the requests sent on a kept-alive connection.
func (l *Listener) Dropped() int64 { return l.dropped.Load() }

// conn is one connection of a Listener.
type conn struct {
	net.Conn
	answered atomic.Bool
	dropped  *atomic.Int64
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
		c.dropped.Add(1)
		_ = c.Conn.Close()
		return 0, net.ErrClosed
	}
	return n, err
}
