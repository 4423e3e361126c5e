package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
)

// server is a server wired with drainkit as the README's "Wire it" shows
// (drain.NewServer over its lister, Server.Admit, Server.Run), configured
// only by the environment its manifest sets (DRAINKIT_GRACE,
// DRAINKIT_HOOK_LISTEN, DRAINKIT_HOOK_SECRET, POD_NAME, ...), so that the
// real-kubelet suite can run the README's manifest as written. Its
// sandboxes are fakes that estimate nothing themselves: the plan counts
// DRAINKIT_PRESERVE_ESTIMATE for them, as for a server's real ones. After
// Run it writes the drain's Report to -report and exits with Run's status;
// after a Run that returned 2 (nothing served, nothing drained) it writes
// none.
func server(args []string) int {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	listen := fs.String("listen", ":8080", "the server's address (http.Server.Addr)")
	n := fs.Int("sandboxes", 0, "sandboxes running at start")
	latency := fs.Duration("pause", 100*time.Millisecond, "how long one preserve takes")
	report := fs.String("report", "", "file the drain's Report is written to (required)")
	if fs.Parse(args) != nil || *report == "" || *n < 0 {
		fmt.Fprintln(os.Stderr, "server: bad usage")
		return 2
	}
	node := draintest.NewNode()
	for i := range *n {
		node.Add(&draintest.Sandbox{Name: fmt.Sprintf("sb-%d", i), Latency: *latency})
	}
	mux := http.NewServeMux()
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s, err := drain.NewServer(srv, node)
	if err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		return 1
	}
	mux.Handle("POST /sandboxes", s.Admit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		node.Add(&draintest.Sandbox{Name: fmt.Sprintf("sb-%d", time.Now().UnixNano()), Latency: *latency})
	})))
	code := s.Run(context.Background())
	if code == 2 {
		// Nothing served, nothing drained (Run logged why): Shutdown would
		// start a drain now, and its Report would stand for a run that
		// never was.
		return code
	}
	rep := s.Drainer().Shutdown(context.Background()) // single-flight: the Report Run had
	data, err := json.Marshal(rep)
	if err == nil {
		err = os.WriteFile(*report, data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "server: the Report:", err)
		return 1
	}
	return code
}
