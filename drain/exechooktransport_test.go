package drain

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/wrappedtransport"
)

// Fault: an ExecHook without a Client built its own on
// http.DefaultTransport cloned through an unchecked type assertion to
// *http.Transport, so a program that had put a wrapper there
// (otelhttp.NewTransport(http.DefaultTransport), a recording RoundTripper)
// panicked in Run, at the preStop: "interface conversion:
// http.RoundTripper is *wrappedtransport.Counting, not *http.Transport", and
// no drain wait started.
//
//	program    http.DefaultTransport = a wrapper of it; HTTP_PROXY at a
//	           proxy answering 403
//	Run        before: panic; now the hook's own client on a transport
//	           with net/http's default settings and no proxy
//	the call   reaches the Drainer's PreStop on the pod's address
//	           (0.0.0.0, which Go's proxy rule does not exempt), not the
//	           proxy, not the wrapper: the drain wait is over
//
// The wrapper is not used: the hook's guarantee (no proxy, as the
// kubelet's own httpGet hook) holds of net/http's transport alone; a
// program whose calls must go through it sets ExecHook.Client. The test
// runs in a child process, because Go reads the proxy variables once per
// process.
func TestExecHookWithoutAClientWhenTheProgramWrappedTheDefaultTransport(t *testing.T) {
	if os.Getenv(wrappedTransportChild) == "" {
		var proxied atomic.Int32
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			proxied.Add(1)
			http.Error(w, "proxy: forbidden", http.StatusForbidden)
		}))
		defer proxy.Close()
		cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), wrappedTransportChild+"=1",
			"HTTP_PROXY="+proxy.URL, "http_proxy="+proxy.URL, "NO_PROXY=", "no_proxy=")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Contains(t, string(out), "--- PASS: "+t.Name(), "the child ran the test")
		assert.Zero(t, proxied.Load(), "calls that went to the proxy")
		return
	}
	wrapper := wrappedtransport.Install(t)

	f := newFixture(t, fixtureOpts{grace: 600 * time.Second, margin: 5 * time.Second})
	srv := httptest.NewServer(f.d.PreStop())
	defer srv.Close()
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	var sum *PreStopSummary
	require.NotPanics(t, func() {
		sum, err = ExecHook{URL: "http://0.0.0.0:" + port + "/drain", MaxFailures: 1}.Run(context.Background())
	})
	require.NoError(t, err)
	assert.True(t, sum.Done, "the drain wait is over: the call reached the Drainer")
	assert.True(t, f.d.Gate().Closed(), "the drain started")
	assert.Zero(t, wrapper.Requests(), "the hook's own client, not the program's wrapper")
	srv.CloseClientConnections()
	require.NoError(t, f.d.Shutdown(context.Background()).Err())
}

// wrappedTransportChild marks the child process of
// TestExecHookWithoutAClientWhenTheProgramWrappedTheDefaultTransport.
const wrappedTransportChild = "DRAIN_TEST_WRAPPED_TRANSPORT"
