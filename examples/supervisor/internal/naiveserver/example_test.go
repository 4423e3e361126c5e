package naiveserver_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/drainkit/drainkit/examples/supervisor/internal/naiveserver"
)

// What survives the process: one record per paused sandbox in the state
// directory, loaded back as paused sandboxes at the next start.
func ExampleLoadRecords() {
	dir, _ := os.MkdirTemp("", "naiveserver")
	defer os.RemoveAll(dir)
	for _, id := range []string{"sb-2", "sb-1"} {
		b, _ := json.Marshal(naiveserver.Record{ID: id, State: naiveserver.Paused})
		_ = os.WriteFile(filepath.Join(dir, id+".json"), b, 0o644)
	}
	recs, err := naiveserver.LoadRecords(dir)
	for _, r := range recs {
		fmt.Println(r.ID, r.State)
	}
	fmt.Println(err)
	// Output:
	// sb-1 paused
	// sb-2 paused
	// <nil>
}
