package drain_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/pause"
)

// host is the server's record of its one sandbox.
type host struct {
	mu     sync.Mutex
	paused bool
}

// vm is a sandbox whose preserve pauses it and persists it.
type vm struct {
	id string
	h  *host
}

func (v vm) ID() string { return v.id }

func (v vm) Preserve(context.Context) error {
	v.h.mu.Lock()
	defer v.h.mu.Unlock()
	v.h.paused = true
	return nil
}

// An HTTP sandbox server wired with drain: creates are gated, the preStop
// hook is GET /drain, readiness is GET /readyz, and SIGTERM runs Shutdown.
func Example() {
	h := &host{}
	running := func(context.Context) ([]pause.Sandbox, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.paused {
			return nil, nil
		}
		return []pause.Sandbox{vm{id: "sb-1", h: h}}, nil
	}

	budget, _ := deadline.New(3600*time.Second, deadline.Config{}) // from the -grace flag: the pod's terminationGracePeriodSeconds
	gate := &drain.Gate{Exempt: []drain.Class{drain.Pause, drain.Delete}}
	mux := http.NewServeMux()
	srv := httptest.NewUnstartedServer(mux)
	d, err := drain.New(drain.Config{
		Budget:    budget,
		Gate:      gate,
		Sandboxes: pause.ListFunc(running),
		Steps:     []drain.Step{drain.HTTPServerStep("http", srv.Config, 5*time.Second)},
	})
	if err != nil {
		panic(err)
	}
	mux.Handle("POST /sandboxes", gate.Admit(drain.Create, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	mux.Handle("GET /readyz", gate.Readiness(nil))
	mux.Handle("GET /drain", d.PreStop())
	// In main, the signals before serving: signal.Notify(sigs, syscall.SIGTERM, os.Interrupt).
	sigs := make(chan os.Signal, 4)
	srv.Start()
	defer srv.Close()

	status := func(method, path string) int {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	fmt.Println("create:", status("POST", "/sandboxes"), "ready:", status("GET", "/readyz"))

	// The kubelet's preStop hook (?wait=0s: show progress instead of waiting
	// the drain phase out).
	resp, _ := http.Get(srv.URL + "/drain?wait=0s")
	var sum drain.PreStopSummary
	_ = json.NewDecoder(resp.Body).Decode(&sum)
	resp.Body.Close()
	fmt.Println("preStop:", sum.Reason, "running:", sum.Running)
	fmt.Println("create:", status("POST", "/sandboxes"), "ready:", status("GET", "/readyz"))

	sigs <- syscall.SIGTERM // the kubelet's
	rep := d.ServeSignals(context.Background(), sigs)
	fmt.Println("preserved:", rep.Preserve.Counts[pause.Preserved], "lost:", rep.Lost(), "err:", rep.Err())
	// Output:
	// create: 201 ready: 200
	// preStop: waiting running: 1
	// create: 503 ready: 503
	// preserved: 1 lost: 0 err: <nil>
}

// The one-call path for a net/http sandbox server: four drainkit names
// besides the server's own pause.Sandbox adapter (NewServer, ListFunc,
// Admit, Run). The pod's manifest sets DRAINKIT_GRACE to its
// terminationGracePeriodSeconds and points the preStop hook at
// DRAINKIT_HOOK_LISTEN (loopback for an exec hook; the pod's address and
// DRAINKIT_HOOK_SECRET for an httpGet one).
func ExampleNewServer() {
	running := func(context.Context) ([]pause.Sandbox, error) { return nil, nil } // the server's own listing
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	ctx := context.Background()
	mux := http.NewServeMux()
	srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	s, err := drain.NewServer(srv, pause.ListFunc(running)) // grace from DRAINKIT_GRACE
	if err != nil {
		log.Fatal(err) // names the variable that is wrong, e.g. DRAINKIT_GRACE
	}
	mux.Handle("POST /sandboxes", s.Admit(create)) // 503 + Retry-After once draining
	os.Exit(s.Run(ctx))                            // serves until SIGTERM, drains, exits 0 when nothing was lost and every step ended in time
}
