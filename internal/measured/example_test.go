package measured_test

import (
	"fmt"
	"time"

	"github.com/drainkit/drainkit/internal/measured"
	"github.com/drainkit/drainkit/pause"
)

// A drain's Report says whether its Preserver measured a level: an entry
// that is a sample of it.
func ExampleSample() {
	rep := &pause.Report{Entries: []pause.Entry{
		{ID: "retried", Outcome: pause.Preserved, Attempts: 2, Duration: 3 * time.Second},
		{ID: "again", Outcome: pause.Preserved, Attempts: 1, Relisted: 1, Duration: 10 * time.Millisecond},
		{ID: "first", Outcome: pause.Preserved, Attempts: 1, Duration: 2 * time.Second},
	}}
	for _, e := range rep.Entries {
		sample := measured.Sample(measured.Preserve{Preserved: e.Outcome == pause.Preserved,
			Attempts: e.Attempts, Relisted: e.Relisted, Took: e.Duration})
		fmt.Println(e.ID, sample)
	}
	// Output:
	// retried false
	// again false
	// first true
}
