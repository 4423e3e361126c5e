package lastreporttest_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/drainkit/drainkit/internal/lastreport/lastreporttest"
)

// A test waits for a server's drain to end by Finished, not by the file's being
// there: from the drain's start the file holds its account marked unfinished
// (lastreport.Progress), at its top or in the supervisor's "drain" member.
func ExampleFinished() {
	dir, err := os.MkdirTemp("", "lastreporttest")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	report := filepath.Join(dir, "last-shutdown.json")
	for _, account := range []string{
		`{"start": "2026-12-07T02:00:00Z", "unfinished": {"phase": "preserve"}}`,
		`{"drain": {"start": "2026-12-07T02:00:00Z", "unfinished": {"phase": "gate"}}}`,
		`{"start": "2026-12-07T02:00:00Z", "end": "2026-12-07T02:00:04Z"}`,
		`{"drain": {"start": "2026-12-07T02:00:00Z"}, "exit_code": 0}`,
	} {
		if err := os.WriteFile(report, []byte(account), 0o600); err != nil {
			panic(err)
		}
		fmt.Println(lastreporttest.Finished(report))
	}
	fmt.Println(lastreporttest.Finished(filepath.Join(dir, "none.json")))
	// Output:
	// false
	// false
	// true
	// true
	// false
}
