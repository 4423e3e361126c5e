package durflag_test

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/drainkit/drainkit/internal/durflag"
)

// A server's -grace takes the manifest's terminationGracePeriodSeconds as
// it is, or a duration; anything else is refused, saying what is wanted.
func Example() {
	for _, args := range [][]string{{"-grace", "30"}, {"-grace", "1m30s"}, {}, {"-grace", "soon"}, {"-grace", "0"}} {
		fs := flag.NewFlagSet("server", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var grace time.Duration
		durflag.GraceVar(fs, &grace, "grace", time.Hour, "the pod's terminationGracePeriodSeconds")
		if err := fs.Parse(args); err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println("grace", grace)
	}
	// Output:
	// grace 30s
	// grace 1m30s
	// grace 1h0m0s
	// invalid value "soon" for flag -grace: want whole seconds (30) or a duration (30s, 1m30s), got "soon"
	// invalid value "0" for flag -grace: must be positive, got "0"
}
