package wrappedtransport_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/wrappedtransport"
)

// A client on http.DefaultTransport goes through the wrapper, which counts
// each request; at cleanup the transport is the one before.
func TestInstallCountsWhatGoesThroughAndPutsTheTransportBack(t *testing.T) {
	before := http.DefaultTransport
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	t.Run("installed", func(t *testing.T) {
		wrapper := wrappedtransport.Install(t)
		assert.Same(t, wrapper, http.DefaultTransport)
		for range 2 {
			resp, err := (&http.Client{}).Get(srv.URL)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
		}
		assert.Equal(t, int64(2), wrapper.Requests())
	})
	assert.Same(t, before, http.DefaultTransport)
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
}
