package drain

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/kubeproxy"
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
			svc := kubeproxy.Start(t, readyEndpoint(a), readyEndpoint(b))
			client := &http.Client{Transport: &http.Transport{}}
			url := "http://" + svc + "/sandboxes"
			if h2 {
				client.Transport = &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
				url = "https://" + svc + "/sandboxes"
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

// readyEndpoint is n behind a Service, ready while its GET /readyz answers
// 200.
func readyEndpoint(n *httptest.Server) kubeproxy.Endpoint {
	return kubeproxy.Endpoint{Addr: n.Listener.Addr().String(), Ready: func() bool {
		resp, err := n.Client().Get(n.URL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}}
}
