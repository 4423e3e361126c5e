package drain

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fault: the listing fails every time (the runtime's API answers 500).
// Twenty sandboxes run, none is preserved, and no entry is lost because
// none was ever listed: the preserve phase is Failed, not OK, and the
// Report's error says the sandboxes are unknown, with the last error.
func TestFailedListingIsUnknownNotSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, margin: 2 * time.Second,
			sandboxes: 20, latency: time.Second, limit: 4})
		f.node.ListErr = func(int) error { return errors.New("500 Internal Server Error") }
		rep := f.d.Shutdown(context.Background())
		assert.Zero(t, rep.Lost())
		pres := rep.Phase(PhasePreserve)
		require.NotNil(t, pres)
		assert.Equal(t, Failed, pres.Result)
		assert.Contains(t, pres.Error, "unknown")
		require.Error(t, rep.Err())
		assert.Contains(t, rep.Err().Error(), "500 Internal Server Error")
	})
}
