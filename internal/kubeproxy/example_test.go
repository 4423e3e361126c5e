package kubeproxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/drainkit/drainkit/internal/kubeproxy"
)

// A node drains: its readiness turns, the client's open connection (HTTP
// keep-alive) stays with it, and a new one goes to the node that is ready.
// An Example has no *testing.T: exampleTB runs the Service's cleanup at its
// end, as a test's end does.
func Example() {
	node := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, name)
		}))
	}
	a, b := node("a"), node("b")
	defer a.Close()
	defer b.Close()
	var aReady atomic.Bool
	aReady.Store(true)
	tb := &exampleTB{}
	defer tb.end()
	svc := kubeproxy.Start(tb, kubeproxy.Endpoint{Addr: a.Listener.Addr().String(), Ready: aReady.Load},
		kubeproxy.Endpoint{Addr: b.Listener.Addr().String(), Ready: func() bool { return true }})

	get := func(c net.Conn) string {
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: svc\r\n\r\n"); err != nil {
			return err.Error()
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	kept, err := net.Dial("tcp", svc)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer kept.Close()
	fmt.Println("open connection:", get(kept))
	aReady.Store(false) // a drains
	fmt.Println("open connection, a not ready:", get(kept))
	fresh, err := net.Dial("tcp", svc)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fresh.Close()
	fmt.Println("new connection:", get(fresh))
	// Output:
	// open connection: a
	// open connection, a not ready: a
	// new connection: b
}

// exampleTB is the testing.TB an Example has none of: Cleanup's functions
// run at end, last first.
type exampleTB struct {
	testing.TB // the methods Start does not call: nil, they panic
	cleanups   []func()
}

func (tb *exampleTB) Helper()                   {}
func (tb *exampleTB) Cleanup(f func())          { tb.cleanups = append(tb.cleanups, f) }
func (tb *exampleTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (tb *exampleTB) end() {
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.cleanups[i]()
	}
}
