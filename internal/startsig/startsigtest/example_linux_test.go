package startsigtest_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/drainkit/drainkit/internal/startsig/startsigtest"
)

// A start held at a gate the test has opened goes on at once, having said it was held.
func ExampleHold() {
	dir, _ := os.MkdirTemp("", "gate")
	defer os.RemoveAll(dir)
	gate := filepath.Join(dir, "gate")
	_ = os.WriteFile(gate, nil, 0o600) // the test lets the start go on

	startsigtest.Hold(gate)
	_, err := os.Stat(gate + ".held")
	fmt.Println("said it was held:", err == nil)
	// Output: said it was held: true
}
