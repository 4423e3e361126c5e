package kubeproxy

import (
	"io"
	"net"
	"sync"
	"testing"
)

// An Endpoint is one node behind the Service.
type Endpoint struct {
	Addr  string      // where the node listens (TCP)
	Ready func() bool // its readiness probe, asked for each new connection
}

// Start serves a Service over eps on a loopback port until t ends, and
// returns its address. Each new connection goes to the first endpoint
// whose Ready says so, and is closed at once when none does. When t ends
// the Service closes its listener and every connection, and waits for its
// goroutines.
func Start(t testing.TB, eps ...Endpoint) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("kubeproxy: %v", err)
	}
	s := &service{eps: eps, open: map[net.Conn]bool{}}
	s.conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			untrack := s.track(c)
			s.conns.Go(func() {
				defer untrack()
				s.forward(c)
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		s.closed = true
		for c := range s.open {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.conns.Wait()
	})
	return ln.Addr().String()
}

type service struct {
	eps []Endpoint

	mu     sync.Mutex
	open   map[net.Conn]bool // the clients' connections and the nodes', closed when the test ends
	closed bool              // the test ended: a connection made since is closed at once
	conns  sync.WaitGroup
}

// forward relays c to the first ready endpoint until both directions have
// ended: a half-close is passed on (pass), an error closes both.
func (s *service) forward(c net.Conn) {
	defer c.Close()
	to := ""
	for _, ep := range s.eps {
		if ep.Ready() {
			to = ep.Addr
			break
		}
	}
	if to == "" {
		return // no endpoint: the connection is refused
	}
	node, err := net.Dial("tcp", to)
	if err != nil {
		return
	}
	defer s.track(node)()
	var relay sync.WaitGroup
	relay.Go(func() { pass(node, c) })
	pass(c, node)
	relay.Wait()
	_ = node.Close()
}

// track adds conn to the connections closed when the test ends (or closes
// it at once, when it has ended), and returns the func that takes it out.
// The node's side is one: a node that read the client's half-close and
// held its side open held the relay reading it, and the test's end,
// closing the clients' side alone, waited on it for ever (row 1591).
func (s *service) track(conn net.Conn) (untrack func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = conn.Close()
	} else {
		s.open[conn] = true
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.open, conn)
	}
}

// pass relays src to dst until src's EOF, which it passes on as a
// half-close of dst (the other direction stays open, as through
// kube-proxy's NAT, which passes the FIN on), or until an error, which
// closes dst: the other direction then ends too.
func pass(dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close()
		return
	}
	if hc, ok := dst.(interface{ CloseWrite() error }); ok && hc.CloseWrite() == nil {
		return
	}
	_ = dst.Close()
}
