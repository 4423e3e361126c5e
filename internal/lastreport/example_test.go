package lastreport_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/drainkit/drainkit/internal/lastreport"
)

// A server writes its drain's Report at exit: where it cannot, no Report at all is
// left at path rather than an earlier shutdown's.
func Example() {
	dir, err := os.MkdirTemp("", "lastreport")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "last-shutdown.json")
	logger := slog.New(slog.DiscardHandler)
	rep := map[string]int{"preserved": 2}

	data, err := json.MarshalIndent(rep, "", "  ")
	if err == nil {
		err = lastreport.Write(path, data, 0o600, logger)
	}
	// err != nil: no Report at path, this drain's or another's (unless the error says so)

	written, _ := os.ReadFile(path)
	fmt.Println(err, string(written))
	// Output:
	// <nil> {
	//   "preserved": 2
	// }
}
