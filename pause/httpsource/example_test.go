package httpsource_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/drainkit/drainkit/pause/httpsource"
)

// A sandbox server with AgentENV's API, written without drainkit: the
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

	src, err := httpsource.New(srv.URL)
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
