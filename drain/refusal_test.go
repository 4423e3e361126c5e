package drain

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fault (a review of the gate): a request the gate refused was answered
// 503 with Retry-After, "retry on another node", on a connection the
// server kept open. A client behind a Service keeps its connection (HTTP/1
// keep-alive, the one HTTP/2 connection) to the node it was first sent
// to: readiness turning 503 takes the node out of the endpoints for new
// connections only, so every retry, Retry-After seconds later, reached the
// draining node again and was refused again, until the server's own
// shutdown step closed its idle connections at the end of the drain (up to
// the whole grace: an hour in the README's manifest). On loopback, through
// a Service of two nodes: 3 of 3 retries refused by the draining node,
// over HTTP/1.1 and HTTP/2 alike. The refusal now closes its connection
// (Connection: close; Go's HTTP/2 server sends a GOAWAY for it), as
// k8s.io/apiserver's WithRetryAfter does, so that the retry opens a new
// one, which the Service sends to a node still ready.
func TestARefusedCreateIsRetriedOnAnotherNode(t *testing.T) {
	for _, proto := range []string{"HTTP/1.1", "HTTP/2.0"} {
		t.Run(proto, func(t *testing.T) {
			h2 := proto == "HTTP/2.0"
			draining := &Gate{}
			a, b := sandboxNode(t, "A", draining, h2), sandboxNode(t, "B", &Gate{}, h2)
			svc := newService(t, a, b)
			client := &http.Client{Transport: &http.Transport{}}
			url := "http://" + svc.Addr().String() + "/sandboxes"
			if h2 {
				client.Transport = &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
				url = "https://" + svc.Addr().String() + "/sandboxes"
			}
			defer client.CloseIdleConnections()
			create := func() (*http.Response, string) {
				resp, err := client.Post(url, "application/json", strings.NewReader(`{"image":"base"}`))
				require.NoError(t, err)
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				return resp, strings.TrimSpace(string(body))
			}

			resp, body := create()
			require.Equal(t, "created on A", body)
			require.Equal(t, proto, resp.Proto)
			draining.Close() // node A's preStop call
			resp, body = create()
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
			assert.Equal(t, "5", resp.Header.Get("Retry-After"))
			for range 3 { // as Retry-After asks
				_, body = create()
				assert.Equal(t, "created on B", body, "the retry went to the draining node again")
			}
		})
	}
}

// sandboxNode is one node's sandbox API: its readiness and a create the
// gate admits, which answers with the node's name.
func sandboxNode(t *testing.T, name string, g *Gate, h2 bool) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET /readyz", g.Readiness(nil))
	mux.Handle("POST /sandboxes", g.Admit(Create, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "created on "+name)
	})))
	srv := httptest.NewUnstartedServer(mux)
	if h2 {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv
}

// service is a Service on loopback in front of nodes, as kube-proxy makes
// one: each new connection goes to the first node whose readiness answers
// 200 (the endpoints a readiness probe keeps), and stays with that node
// for as long as it is open.
type service struct {
	net.Listener
	nodes []*httptest.Server

	mu    sync.Mutex
	open  map[net.Conn]bool // the clients' connections, closed at the test's end
	conns sync.WaitGroup
}

func newService(t *testing.T, nodes ...*httptest.Server) *service {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &service{Listener: ln, nodes: nodes, open: map[net.Conn]bool{}}
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
	return s
}

// forward relays c to the first ready node until either end closes.
func (s *service) forward(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.open, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
	var node *httptest.Server
	for _, n := range s.nodes {
		resp, err := n.Client().Get(n.URL + "/readyz")
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			node = n
			break
		}
	}
	if node == nil {
		return // no endpoint: the connection is refused
	}
	b, err := net.Dial("tcp", node.Listener.Addr().String())
	if err != nil {
		return
	}
	var relay sync.WaitGroup
	relay.Go(func() { _, _ = io.Copy(b, c); _ = b.Close() })
	_, _ = io.Copy(c, b)
	_ = c.Close()
	relay.Wait()
}
