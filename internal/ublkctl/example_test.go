package ublkctl_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/drainkit/drainkit/internal/ublkctl"
)

// A missing control device says what to do about it.
func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "dev")
	defer os.RemoveAll(dir)
	_, err := ublkctl.Open(filepath.Join(dir, "ublk-control"))
	fmt.Println(errors.Is(err, ublkctl.ErrNoControl))
	fmt.Println(ublkctl.StateQuiesced, ublkctl.StateFailIO)
	// Output:
	// true
	// quiesced fail_io
}
