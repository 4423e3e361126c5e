package proctest_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/drainkit/drainkit/internal/proc/proctest"
)

// againValue names, in the environment of this test binary run again, the
// child of TestAgainGivesTheChildTheValueItsTestSet, and what it is given.
const againValue = "DRAINKIT_PROCTEST_AGAIN_VALUE"

// A test that set its child's variable to a value of its own (a pid file's
// path) gets that value in its child, not Again's "1", which made the
// child write its pid to a file named "1".
func TestAgainGivesTheChildTheValueItsTestSet(t *testing.T) {
	if v, ok := os.LookupEnv(againValue); ok {
		fmt.Printf("given %q\n", v)
		return
	}
	t.Setenv(againValue, "/run/the server.pid")

	child := proctest.Again(t, againValue)

	if got := child.Line(t, "what it was given"); got != `given "/run/the server.pid"` {
		t.Fatalf("the child's line: %s, want the value its test set", got)
	}
	child.Decode(t, nil)
}
