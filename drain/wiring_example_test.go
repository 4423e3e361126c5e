package drain_test

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/ublk"
)

// The full wiring of the package documentation, for a server that needs
// more than NewServer: its own budget, Gate classes, a ublk teardown step
// and a guarded hook listener. (Compiled, not run: it serves until
// SIGTERM.)
func Example_wiring() {
	grace := *flag.Duration("grace", time.Hour, "the pod's terminationGracePeriodSeconds")
	flag.Parse()
	ctx := context.Background()
	logger := slog.Default()
	secret := os.Getenv(drain.EnvHookSecret)
	listRunning := func(context.Context) ([]pause.Sandbox, error) { return nil, nil } // the server's registry
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	mux := http.NewServeMux()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", ":8080")
	if err != nil {
		log.Fatal(err)
	}
	hookLn, err := net.Listen("tcp", "127.0.0.1:8082")
	if err != nil {
		log.Fatal(err)
	}
	ublkd := exec.Command("/usr/local/bin/ublkd")
	if err := ublkd.Start(); err != nil {
		log.Fatal(err)
	}
	daemon, err := ublk.FindProcess(ublkd.Process.Pid)
	if err != nil {
		log.Fatal(err)
	}

	budget, err := deadline.New(grace, deadline.Config{}) // the pod's terminationGracePeriodSeconds; the margin scales with it
	if err != nil {
		log.Fatal(err)
	}
	teardown, err := ublk.New(daemon, ublk.Config{}) // a Step whose phase is critical
	if err != nil {
		log.Fatal(err)
	}
	// As NewServer's gate: what takes work off the node, a follow of a sandbox
	// still running here, and a keep-alive that keeps it running until preserved.
	gate := &drain.Gate{Exempt: []drain.Class{drain.Pause, drain.Checkpoint, drain.Delete, drain.Stream, drain.KeepAlive}}
	d, err := drain.New(drain.Config{
		Budget:    budget,
		Gate:      gate,
		Sandboxes: pause.ListFunc(listRunning),
		Steps:     []drain.Step{teardown, drain.HTTPServerStep("http", srv, 5*time.Second)},
	})
	if err != nil {
		log.Fatal(err) // names the bad field, e.g. Config.Steps[1].Phase().Name
	}
	mux.Handle("POST /sandboxes", gate.Admit(drain.Create, create))
	mux.Handle("GET /readyz", gate.Readiness(nil))
	// The hook on a listener of its own (loopback or the pod's address),
	// guarded: only a request with the secret (httpHeaders) may drain.
	hooks := http.NewServeMux()
	guard := &drain.HookGuard{Secret: secret, Logger: logger}
	hooks.Handle("GET /drain", guard.Wrap(d.PreStop())) // lifecycle.preStop.httpGet.path
	// The signals before anything is served: from its first answer (a
	// readiness probe) the server may be deleted, and a SIGTERM that came
	// before the handler would end it at once, with no drain.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	go http.Serve(hookLn, hooks)
	go srv.Serve(ln)
	rep := d.ServeSignals(ctx, sigs) // SIGTERM starts Shutdown; SIGINT then forces, SIGTERM again does not

	_ = json.NewEncoder(os.Stderr).Encode(rep)
	if rep.Err() != nil {
		os.Exit(1) // sandboxes lost, or a step failed: the Report says which
	}
}
