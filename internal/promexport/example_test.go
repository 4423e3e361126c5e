package promexport_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/drainkit/drainkit/internal/promexport"
)

// A gauge recorded through the provider, scraped from the handler.
func Example() {
	mp, handler, err := promexport.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = mp.Shutdown(context.Background()) }()
	g, _ := mp.Meter("example").Int64Gauge("drainkit.drain.sandboxes.running")
	g.Record(context.Background(), 7)
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		if strings.HasPrefix(line, "drainkit_") {
			fmt.Print(line)
		}
	}
	// Output: drainkit_drain_sandboxes_running 7
}
