package durable_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/drainkit/drainkit/internal/durable"
)

func Example() {
	dir, err := os.MkdirTemp("", "durable")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "report.json")
	if err := durable.WriteFile(path, []byte(`{"lost":0}`), 0o600); err != nil {
		fmt.Println(err)
		return
	}
	data, _ := os.ReadFile(path)
	fmt.Println(string(data))
	// Output: {"lost":0}
}
