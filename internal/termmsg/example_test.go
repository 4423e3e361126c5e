package termmsg_test

import (
	"errors"
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

// The line that says where the full Report is, or why there is none.
func ExampleReportLine() {
	fmt.Println(termmsg.ReportLine("/state/last-shutdown.json", nil))
	fmt.Println(termmsg.ReportLine("/state/last-shutdown.json", errors.New("no space left on device")))
	// Output:
	// full report: /state/last-shutdown.json
	// the full report could not be written: no space left on device
}

// A server's lines: why it exits 1 when its serving stopped on its own (one line, however
// many errors), then where the full Report is.
func ExampleServerLines() {
	stopped := errors.Join(errors.New("serving the API stopped: accept: EMFILE"), errors.New("serving the preStop hook stopped: accept: EMFILE"))
	for _, l := range termmsg.ServerLines("sandboxd", stopped, "/state/last-shutdown.json", nil) {
		fmt.Println(l)
	}
	fmt.Println(termmsg.ServerLines("gvisor-worker", nil, "/state/last-shutdown.json", nil))
	// Output:
	// sandboxd: serving the API stopped: accept: EMFILE; serving the preStop hook stopped: accept: EMFILE
	// full report: /state/last-shutdown.json
	// [full report: /state/last-shutdown.json]
}
