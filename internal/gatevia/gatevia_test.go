package gatevia_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/gatevia"
	"github.com/drainkit/drainkit/internal/gobuild"
	"github.com/drainkit/drainkit/pause"
)

// Importing drain installs the hook: it is the gate's Enter, admitting an
// operation while the gate is open and counting it in flight until its
// leave, refusing a gated class once the gate is closed, and admitting an
// exempt one still.
func TestDrainInstallsEnterGRPCAtInit(t *testing.T) {
	g := &drain.Gate{Exempt: []drain.Class{drain.Pause}}
	leave, err := gatevia.EnterGRPC(g, string(drain.Create))
	require.NoError(t, err)
	assert.Equal(t, 1, g.InFlight(drain.Create))
	leave()
	leave()
	assert.Equal(t, 0, g.InFlight(drain.Create), "one leave, however often called")

	g.Close()
	_, err = gatevia.EnterGRPC(g, string(drain.Create))
	require.ErrorIs(t, err, drain.ErrDraining)
	assert.Equal(t, 0, g.InFlight(drain.Create))
	leave, err = gatevia.EnterGRPC(g, string(drain.Pause))
	require.NoError(t, err, "exempt")
	leave()
}

// Importing drain installs RetryAfter too: the wait a gRPC refusal asks is
// the one an HTTP refusal's Retry-After says, the gate's RetryAfter or 5 s.
func TestDrainInstallsRetryAfterAtInit(t *testing.T) {
	assert.Equal(t, 5*time.Second, gatevia.RetryAfter(&drain.Gate{}))
	assert.Equal(t, 1500*time.Millisecond, gatevia.RetryAfter(&drain.Gate{RetryAfter: 1500 * time.Millisecond}))
}

// What comes through EnterGRPC and is refused is counted as gRPC's in the
// drain's Report (the gate phase's Detail), apart from what the server's
// own code refused through Gate.Enter.
func TestARefusalThroughEnterGRPCIsCountedAsGRPCs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &drain.Gate{}
		var grpcErr, enterErr error
		refuse := drain.NewStep(deadline.Phase{Name: "refuse", Reserve: deadline.Fixed(time.Second)}, func(context.Context) (any, error) {
			_, grpcErr = gatevia.EnterGRPC(g, string(drain.Create))
			_, enterErr = g.Enter(drain.Fork)
			return nil, nil
		})
		budget, err := deadline.New(30*time.Second, deadline.Config{})
		require.NoError(t, err)
		d, err := drain.New(drain.Config{Budget: budget, Gate: g,
			Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }),
			Steps:     []drain.Step{refuse}})
		require.NoError(t, err)
		rep := d.Shutdown(context.Background())
		require.NoError(t, rep.Err())
		require.ErrorIs(t, grpcErr, drain.ErrDraining)
		require.ErrorIs(t, enterErr, drain.ErrDraining)

		raw, err := json.Marshal(rep)
		require.NoError(t, err)
		var got struct {
			Phases []struct {
				Name   string
				Detail struct {
					Refused int                       `json:"refused"`
					By      map[string]map[string]int `json:"by"`
				}
			}
		}
		require.NoError(t, json.Unmarshal(raw, &got))
		require.Equal(t, drain.PhaseGate, got.Phases[0].Name, "%s", raw)
		assert.Equal(t, 2, got.Phases[0].Detail.Refused)
		assert.Equal(t, map[string]map[string]int{"grpc": {"create": 1}, "enter": {"fork": 1}}, got.Phases[0].Detail.By)
	})
}

// A gate of another type is a caller's bug: EnterGRPC panics, naming the
// type it got.
func TestEnterGRPCPanicsOnAnotherTypeOfGate(t *testing.T) {
	assert.PanicsWithError(t, "interface conversion: interface {} is string, not *drain.Gate", func() {
		_, _ = gatevia.EnterGRPC("gate", string(drain.Create))
	})
}

// A program that does not link package drain has no hook: EnterGRPC
// panics saying so, where the nil function's call was a nil pointer
// dereference that named neither gatevia nor drain.
func TestWithoutDrainEnterGRPCPanicsSayingWhy(t *testing.T) {
	bin, err := gobuild.Program(t.TempDir(), "./internal/gatevia/testdata/nodrain")
	require.NoError(t, err)
	out, err := exec.Command(bin).Output()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	assert.Equal(t, 1, ee.ExitCode())
	assert.Equal(t, "panic: gatevia: EnterGRPC in a program without package drain, which installs it when it is initialised: "+
		"drain/draingrpc imports drain; a program that imports gatevia alone has no gate to enter\n", string(out))
}
