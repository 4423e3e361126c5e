package usererr_test

import (
	"fmt"

	"github.com/drainkit/drainkit/internal/usererr"
)

// A user's Preserve returned its client's *answerError, made for an
// answer that never came: reading it would panic. The caller finds it
// first and says so in its place.
func Example() {
	var err error = &answerError{}
	if usererr.IsNil(err) {
		fmt.Println("a typed nil")
		return
	}
	if v, _ := usererr.Panics(err); v != nil {
		fmt.Printf("an error (%T) whose Error or Unwrap panicked\n", err)
	}
	// Output: an error (*usererr_test.answerError) whose Error or Unwrap panicked
}
