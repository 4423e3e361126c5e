package logonce_test

import (
	"errors"
	"fmt"

	"github.com/drainkit/drainkit/internal/logonce"
)

// A listing polled once a second: its first failure is news, the repeats
// are not until another failure comes, and the first success ends them.
func Example() {
	var listing logonce.Failures
	refused := errors.New("401 Unauthorized")
	gone := errors.New("connection refused")
	for _, err := range []error{refused, refused, refused, gone, gone, nil, nil, refused} {
		if err != nil {
			if news, n := listing.Fail(err.Error()); news {
				fmt.Println("WARN listing failed:", err, "failures", n)
			}
		} else if n := listing.OK(); n > 0 {
			fmt.Println("INFO listing works again, failures", n)
		}
	}
	// Output:
	// WARN listing failed: 401 Unauthorized failures 1
	// WARN listing failed: connection refused failures 4
	// INFO listing works again, failures 5
	// WARN listing failed: 401 Unauthorized failures 1
}
