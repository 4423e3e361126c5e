package podstart_test

import (
	"encoding/pem"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/drainkit/drainkit/examples/internal/podstart"
	"github.com/drainkit/drainkit/kube"
)

// A program started with a POD_UID that is not its pod's: the read at start
// finds it, and drain.New (given this pod) says so at Error and in the
// Report, where a first read at the drain took it for a force deletion.
func Example() {
	// Stands in for the API server: the pod sandboxd-0 under uid-0.
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"sandboxd-0","namespace":"agentenv","uid":"uid-0"}}`)
	}))
	defer api.Close()
	dir, _ := os.MkdirTemp("", "podstart")
	defer os.RemoveAll(dir)
	cfg := kube.Config{Host: api.URL, Namespace: "agentenv",
		TokenFile: filepath.Join(dir, "token"), CAFile: filepath.Join(dir, "ca.crt"),
		UID: "uid-typo"} // POD_UID from a manifest that got it wrong
	_ = os.WriteFile(cfg.TokenFile, []byte("token"), 0o600)
	_ = os.WriteFile(cfg.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw}), 0o600)

	pod, err := kube.New("sandboxd-0", cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	podstart.Read(pod, slog.New(slog.NewTextHandler(os.Stdout, nil)))
	fmt.Println("mismatch at start:", pod.Identity().Mismatch != nil)
	// Output:
	// mismatch at start: true
}
