package listedstate_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/listedstate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// In a program that does not link pause/httpsource (Unlinked: Of before
// httpsource installed its own), Of panics naming the package that installs
// it, not with a nil function's dereference.
func TestOfWithoutHTTPSourcePanicsSayingSo(t *testing.T) {
	assert.PanicsWithValue(t, "listedstate: Of in a program without package pause/httpsource, which installs it when it is initialised: "+
		"only the sandboxes a httpsource.Source lists have a listed state", func() { listedstate.Unlinked(nil) })
}
