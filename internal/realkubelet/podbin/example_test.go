package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// probe refuses a bad command line before it serves or records anything.
func Example() {
	dir, _ := os.MkdirTemp("", "podbin")
	defer os.RemoveAll(dir)
	events := filepath.Join(dir, "events")
	fmt.Println(probe([]string{"-events", events, "-term", "sometimes"}))
	fmt.Println(probe([]string{"-events", events, "-hook", "later"}))
	_, err := os.Stat(events)
	fmt.Println("events file written:", !os.IsNotExist(err))
	// Output:
	// 2
	// 2
	// events file written: false
}
