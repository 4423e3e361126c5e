package store_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/drainkit/drainkit/examples/internal/store"
)

// A paused sandbox written by one server process is loaded by the next; a record that a
// crash tore is reported, not loaded.
func Example() {
	dir, _ := os.MkdirTemp("", "store")
	defer os.RemoveAll(dir)
	st, _ := store.Open(dir)
	_ = st.Put(store.Record{ID: "sb-1", State: "paused", Runtime: "fake", TimeoutS: 60})
	_ = os.WriteFile(filepath.Join(dir, "sb-2.rec"), []byte("drainkit-record/1 80 0f"), 0o600)

	recs, problems, _ := st.Load()
	for _, r := range recs {
		fmt.Println("loaded", r.ID, r.State)
	}
	for _, p := range problems {
		fmt.Println("not loaded", filepath.Base(p.Path)+":", p.Err)
	}
	// Output:
	// loaded sb-1 paused
	// not loaded sb-2.rec: no header line (truncated)
}
