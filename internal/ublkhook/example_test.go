package ublkhook_test

import (
	"fmt"

	"github.com/drainkit/drainkit/internal/ublkhook"
	"github.com/drainkit/drainkit/ublk"
)

// A test pretends the node runs a vulnerable kernel.
func ExampleWith() {
	cfg := ublkhook.With(ublk.Config{}, ublkhook.Hooks{KernelRelease: "6.8.0-45-generic"})
	td, err := ublk.New(nil, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(td.Kernel())
	// Output: 6.8.0-45-generic vulnerable
}
