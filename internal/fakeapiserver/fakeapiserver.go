package fakeapiserver

import (
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/kube"
)

// Start serves h over TLS on 127.0.0.1 until the test ends, and returns the
// server and the kube.Config that reaches it: Host is the server's URL,
// Namespace is namespace, TokenFile holds token as written, and CAFile
// holds the server's certificate in PEM, both files in the test's temporary
// directory. The server logs no TLS handshake errors: the tests that give
// a client the wrong CA make handshakes fail on purpose.
func Start(t testing.TB, h http.Handler, namespace, token string) (*httptest.Server, kube.Config) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	cfg := kube.Config{Host: srv.URL, Namespace: namespace,
		TokenFile: filepath.Join(dir, "token"), CAFile: filepath.Join(dir, "ca.crt")}
	require.NoError(t, os.WriteFile(cfg.TokenFile, []byte(token), 0o600))
	require.NoError(t, os.WriteFile(cfg.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	return srv, cfg
}
