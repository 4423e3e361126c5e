package drainprogress_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/internal/drainprogress"
)

// The one use: before drain.New, hear the Report as it stands at the start
// of the phases and at each phase's end, and copy it before fn returns
// (internal/lastreport.Follow encodes it, and writes it on its own goroutine).
func Example() {
	budget, err := deadline.New(60*time.Second, deadline.Config{})
	if err != nil {
		panic(err)
	}
	cfg := drain.Config{Budget: budget, Sandboxes: draintest.NewNode()}
	drainprogress.Set(&cfg, func(rep any, next string) {
		data, _ := json.Marshal(rep) // a *drain.Report, read before fn returns
		var r struct{ Phases []struct{ Name string } }
		_ = json.Unmarshal(data, &r)
		fmt.Printf("phases ended %d, next %q\n", len(r.Phases), next)
	})
	d, err := drain.New(cfg)
	if err != nil {
		panic(err)
	}
	budget.OnSIGTERM(time.Now())
	d.Shutdown(context.Background())
	// Output:
	// phases ended 0, next "gate"
	// phases ended 1, next "preserve"
	// phases ended 2, next ""
}
