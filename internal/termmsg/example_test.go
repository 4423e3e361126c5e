package termmsg_test

import (
	"fmt"

	"github.com/drainkit/drainkit/internal/termmsg"
)

// What the pod's last state shows when the server exited before any drain.
func ExampleSummary() {
	fmt.Print(termmsg.Summary(nil, "server: exited 1", "full report: /state/report.json"))
	// Output:
	// drainkit: no drain ran
	// server: exited 1
	// full report: /state/report.json
}
