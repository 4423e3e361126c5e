package httpsource_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/drainkit/drainkit/pause"

	"github.com/drainkit/drainkit/pause/httpsource"
)

// A sandbox server with the generic API shape, written without drainkit: the
// Source drives it through the API it already has.
func Example() {
	var mu sync.Mutex
	states := map[string]string{"a": "running", "b": "paused", "c": "running"}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, `[{"id":"a","state":%q},{"id":"b","state":%q},{"id":"c","state":%q}]`,
			states["a"], states["b"], states["c"])
	})
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		states[r.PathValue("id")] = "paused"
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	src, err := httpsource.New(srv.URL, httpsource.Config{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	running, _ := src.List(ctx) // a pause.Lister: hand src to pause.New
	for _, sb := range running {
		fmt.Println("preserve", sb.ID(), sb.Preserve(ctx))
	}
	left, _ := src.RunningIDs(ctx)
	fmt.Println("still running:", len(left))
	// Output:
	// preserve a <nil>
	// preserve c <nil>
	// still running: 0
}

// AgentENV's node API: pages of sandboxes keyed by sandboxID, sized by
// memoryMB (pause.Sized, in bytes).
func ExampleAgentENV() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("nextToken") == "" {
			w.Header().Set("x-next-token", "p2")
			fmt.Fprint(w, `[{"sandboxID":"a","state":"running","memoryMB":1024}]`)
			return
		}
		fmt.Fprint(w, `[{"sandboxID":"b","state":"running","memoryMB":3072}]`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	cfg := httpsource.AgentENV()
	cfg.APIKey = "secret" // sent as X-API-Key
	src, err := httpsource.New(srv.URL, cfg)
	if err != nil {
		panic(err)
	}
	sbs, _ := src.List(context.Background())
	for _, sb := range sbs {
		fmt.Println(sb.ID(), sb.(pause.Sized).Size()>>20, "MiB")
	}
	// Output:
	// a 1024 MiB
	// b 3072 MiB
}
