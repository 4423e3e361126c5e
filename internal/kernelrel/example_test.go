package kernelrel_test

import (
	"fmt"

	"github.com/drainkit/drainkit/internal/kernelrel"
)

func ExampleClassify() {
	for _, release := range []string{"6.8.0-45-generic", "6.6.58", "6.14.5", "6.14.6", "6.15.0-rc7"} {
		class, rule, _ := kernelrel.Classify(release)
		fmt.Printf("%-17s %-14s %s\n", release, class, rule)
	}
	// Output:
	// 6.8.0-45-generic  vulnerable     vendor_build
	// 6.6.58            unaffected     before_bug
	// 6.14.5            vulnerable     race
	// 6.14.6            exit_may_hang  exit_may_hang
	// 6.15.0-rc7        fixed          fixed
}
