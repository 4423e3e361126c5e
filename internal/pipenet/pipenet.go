package pipenet

import (
	"context"
	"net"
	"sync"
)

// A Listener accepts the server's ends of the connections handed to it (Hand, Dial).
// Its zero value is not ready: use Listen.
type Listener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	addr  addr
}

// Listen returns a Listener whose Addr is named name (such as "pipe", or the host and
// port a client's TLS dials).
func Listen(name string) *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{}), addr: addr(name)}
}

// Accept returns the next connection handed to l, or net.ErrClosed once l is closed.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close closes l: Accept, Hand and Dial return net.ErrClosed from now on. It is
// idempotent.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr returns the address Listen named.
func (l *Listener) Addr() net.Addr { return l.addr }

// Hand gives server, a connection's server end, to Accept; it returns net.ErrClosed
// when l is closed first, or ctx's error when ctx ends first.
func (l *Listener) Hand(ctx context.Context, server net.Conn) error {
	select {
	case l.conns <- server:
		return nil
	case <-l.done:
		return net.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Dial returns the client's end of a new connection whose server end it hands to
// Accept (Hand); network and address are not read: it has the signature of
// net.Dialer.DialContext, an http.Transport's DialContext.
func (l *Listener) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	if err := l.Hand(ctx, server); err != nil {
		client.Close()
		server.Close()
		return nil, err
	}
	return client, nil
}

// An addr is a Listener's address.
type addr string

func (addr) Network() string  { return "pipe" }
func (a addr) String() string { return string(a) }
