package httpsource

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fault: the Source's own client followed a same-host redirect whatever
// its scheme, so an https server's 301 to http:// the same host sent the
// API key in clear, and took the plain answer for the listing. Behind a
// load balancer that ends TLS, a server that writes absolute redirects
// from the scheme it sees (nginx's trailing-slash redirect with
// absolute_redirect on, the default) answers https://host/sandboxes with
// exactly that: every listing, readiness's included, sent the key over
// plain HTTP. Loopback servers, one TLS and one plain, both reached as
// sandbox-server.test (its ports 443 and 80).
func TestRedirectFromHTTPSToHTTPIsNotFollowed(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("X-API-Key"))
		mu.Unlock()
		fmt.Fprint(w, `[{"id":"a","state":"running"}]`)
	}))
	defer plain.Close()
	tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/"):
			fmt.Fprint(w, `[{"id":"a","state":"running"}]`)
		case strings.HasPrefix(r.URL.Path, "/v2/"): // canonical, and https
			http.Redirect(w, r, "https://sandbox-server.test"+r.URL.Path+"/", http.StatusMovedPermanently)
		default: // canonical, from the scheme behind the load balancer
			http.Redirect(w, r, "http://sandbox-server.test"+r.URL.Path+"/", http.StatusMovedPermanently)
		}
	}))
	cert, pool := selfSigned(t, "sandbox-server.test")
	tlsSrv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	tlsSrv.StartTLS()
	defer tlsSrv.Close()

	src, err := New("https://sandbox-server.test", Config{APIKey: "s3cret"})
	require.NoError(t, err)
	tr := src.cfg.client.Transport.(*http.Transport)
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		to := map[string]string{
			"sandbox-server.test:443": tlsSrv.Listener.Addr().String(),
			"sandbox-server.test:80":  plain.Listener.Addr().String(),
		}[addr]
		return d.DialContext(ctx, network, to)
	}
	defer src.CloseIdleConnections()

	_, err = src.List(t.Context())
	var se *StatusError
	require.ErrorAs(t, err, &se, "the plain server's answer is no listing of the https server's")
	assert.Equal(t, http.StatusMovedPermanently, se.StatusCode)
	assert.True(t, isPermanent(err), "asking again meets the same redirect")
	mu.Lock()
	assert.Empty(t, keys, "the API key went to http://sandbox-server.test in clear")
	mu.Unlock()

	// An https redirect of the same host is still followed.
	src2, err := New("https://sandbox-server.test", Config{APIKey: "s3cret", ListPath: "/v2/sandboxes"})
	require.NoError(t, err)
	tr2 := src2.cfg.client.Transport.(*http.Transport)
	tr2.TLSClientConfig, tr2.DialContext = tr.TLSClientConfig, tr.DialContext
	defer src2.CloseIdleConnections()
	got, err := src2.List(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, ids(got))
}
