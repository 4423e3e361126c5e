//go:build linux

package fakelogind_test

import (
	"fmt"
	"os"

	"github.com/drainkit/drainkit/internal/fakelogind"
)

// Start refuses a negative InhibitDelayMax before it starts anything; the
// zero Config reports an hour, so that a kubelet never asks systemd (absent)
// to raise it.
func ExampleStart() {
	dir, _ := os.MkdirTemp("", "fakelogind")
	defer os.RemoveAll(dir)
	_, err := fakelogind.Start(dir, fakelogind.Config{InhibitDelayMax: -1})
	fmt.Println(err)
	fmt.Println(fakelogind.DefaultInhibitDelayMax)
	// Output:
	// fakelogind: Config.InhibitDelayMax must be >= 0, got -1ns
	// 1h0m0s
}
