package httpdefault_test

import (
	"fmt"
	"net/http"

	"github.com/drainkit/drainkit/internal/httpdefault"
)

// wrapped stands for a program's wrapper in http.DefaultTransport, such as
// otelhttp's.
type wrapped struct{ next http.RoundTripper }

func (w wrapped) RoundTrip(r *http.Request) (*http.Response, error) { return w.next.RoundTrip(r) }

func Example() {
	saved := http.DefaultTransport
	defer func() { http.DefaultTransport = saved }()

	own := httpdefault.Transport()
	own.Proxy = nil // a client that must not go through HTTP_PROXY
	fmt.Println("a copy, not the default itself:", own != saved)

	http.DefaultTransport = wrapped{saved}
	tr := httpdefault.Transport()
	fmt.Println("with a wrapper there, net/http's settings:", tr.ForceAttemptHTTP2, tr.MaxIdleConns, tr.IdleConnTimeout)
	// Output:
	// a copy, not the default itself: true
	// with a wrapper there, net/http's settings: true 100 1m30s
}
