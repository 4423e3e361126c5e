package drain

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// A pod whose spec.terminationGracePeriodSeconds is 0 gets 1 s from the
// kubelet ("no matter what, we always supply a grace period of 1",
// calculateEffectiveGracePeriod), SIGKILL 2 s after SIGTERM. With
// DRAINKIT_GRACE unset the server failed to start ("spec.terminationGrace
// PeriodSeconds is missing or not positive", the pod's spec "could not be
// read"), whatever its preserves took; it now plans the 1 s, says so, and
// drains in it when one round of preserves fits, and otherwise refuses as
// for any grace too short, naming the field.
func TestAZeroGraceInThePodsSpecIsTheKubeletsOneSecond(t *testing.T) {
	api := newPodAPI(t)
	api.SetGrace(0)
	inClusterOf(t, api)
	t.Setenv(EnvGrace, "")
	t.Setenv(EnvPreserveEstimate, "100ms")
	logs := logToDefault(t)
	node := fakesandbox.NewNode()
	node.AddN("sb", 2, 10*time.Millisecond)

	s, err := NewServer(&http.Server{Addr: "127.0.0.1:0", ReadHeaderTimeout: time.Second}, pause.Lister(node))
	require.NoError(t, err)
	assert.Equal(t, time.Second, s.Drainer().Budget().Grace())
	assert.Contains(t, logs.String(), "1 s, which the kubelet gives a 0 or a 1")

	sigs, code, _ := serveLoopback(s)
	sigs <- syscall.SIGTERM
	assert.Equal(t, 0, <-code)
	rep := s.Drainer().Shutdown(context.Background())
	require.NotNil(t, rep.Preserve)
	assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved], "two 10 ms preserves fit in the 2 s the kubelet leaves after SIGTERM")
	assert.Equal(t, time.Second, rep.Budget.Grace)

	t.Setenv(EnvGrace, "30") // a variable that is not the spec's: the spec's 1 s, logged
	s, err = NewServer(&http.Server{Addr: "127.0.0.1:0"}, fakesandbox.NewNode())
	require.NoError(t, err)
	assert.Equal(t, time.Second, s.Drainer().Budget().Grace())

	t.Setenv(EnvGrace, "")
	t.Setenv(EnvPreserveEstimate, "") // a round of 1 s does not fit
	_, err = NewServer(&http.Server{Addr: "127.0.0.1:0"}, fakesandbox.NewNode())
	assert.ErrorContains(t, err, "drain: the pod's spec.terminationGracePeriodSeconds (1s, which the kubelet gives a 0 too) is too short")
}
