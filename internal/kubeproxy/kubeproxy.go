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
			s.mu.Lock()
			s.open[c] = true
			s.mu.Unlock()
			s.conns.Go(func() { s.forward(c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
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

	mu    sync.Mutex
	open  map[net.Conn]bool // the clients' connections, closed when the test ends
	conns sync.WaitGroup
}

// forward relays c to the first ready endpoint until either end closes.
func (s *service) forward(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.open, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
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
	var relay sync.WaitGroup
	relay.Go(func() { pass(node, c) })
	pass(c, node)
	relay.Wait()
	_ = node.Close()
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
