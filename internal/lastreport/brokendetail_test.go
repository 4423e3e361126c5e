package lastreport

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/pause"
)

// devicesDetail is a step's Detail that encodes itself from what its step found, as a
// user's device teardown reports the devices it stopped: one its step never filled (it
// failed first) panics in MarshalJSON.
type devicesDetail struct{ stopped *[]string }

func (d *devicesDetail) MarshalJSON() ([]byte, error) { return json.Marshal(*d.stopped) }

// A step whose Detail panics in MarshalJSON is in the drain's account, and in its final
// Report, with that said in the Detail's place, and the steps after it run. The
// Progress encoded the Report at the step's end, on the drain's goroutine, outside any
// recover (encoding/json recovers its own panics only), and the panic ended the process
// after the preserve phase: the later steps, the Report and its file lost; the server's
// own encoding of the final Report (json.MarshalIndent) panicked the same way.
//
//	0 s    SIGTERM: 2 sandboxes preserved (1 s each, one at a time)
//	2 s    step "ublk" returns its Detail never filled, and "devices busy": failed;
//	       the account rewritten, the Detail said as its panic
//	2 s    step "http": OK; the final Report encodes, and Finish writes it
func TestAStepDetailWhoseMarshalJSONPanicsIsSaidNotACrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "last-shutdown.json")
		budget, err := deadline.New(60*time.Second, deadline.Config{})
		require.NoError(t, err)
		node := draintest.NewNode()
		node.AddN("sb", 2, time.Second)
		var ran []string
		cfg := drain.Config{Budget: budget, Sandboxes: node, Pause: pause.Config{Limit: 1}, Steps: []drain.Step{
			drain.NewStep(deadline.Phase{Name: "ublk", Reserve: deadline.Fixed(time.Second)}, func(context.Context) (any, error) {
				return &devicesDetail{}, errors.New("devices busy")
			}),
			drain.NewStep(deadline.Phase{Name: "http", Reserve: deadline.Fixed(time.Second)}, func(context.Context) (any, error) {
				ran = append(ran, "http")
				return nil, nil
			}),
		}}
		p := Follow(&cfg, path, 0o600, slog.New(slog.DiscardHandler), nil)
		d, err := drain.New(cfg)
		require.NoError(t, err)
		p.Start(d)
		rep := d.Shutdown(context.Background())
		synctest.Wait() // the last phase's end written
		const said = "drain: step ublk's Detail (*lastreport.devicesDetail) panicked in MarshalJSON: runtime error: invalid memory address or nil pointer dereference"

		var account struct {
			Unfinished *Unfinished
			Phases     []drain.PhaseReport
		}
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, &account))
		require.NotNil(t, account.Unfinished, "the drain's account as it stood")
		require.Len(t, account.Phases, 4, "gate, preserve, ublk, http: %s", data)
		assert.Contains(t, account.Phases[2].Detail, said)

		assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved])
		assert.Equal(t, drain.Failed, rep.Phase("ublk").Result)
		assert.Equal(t, []string{"http"}, ran, "the step after it ran")
		final, err := json.MarshalIndent(rep, "", "  ")
		require.NoError(t, err)
		require.NoError(t, p.Finish(final))
		data, err = os.ReadFile(path)
		require.NoError(t, err)
		assert.NotContains(t, string(data), `"unfinished"`)
		assert.Contains(t, string(data), said)
	})
}

// A step whose Detail cannot be encoded (a field of a type JSON has no form for, a
// MarshalJSON that returns an error) made the whole Report unencodable: the Progress
// logged "could not be encoded" and kept the account of before the step, and the
// servers' writeReport (json.MarshalIndent of the final Report) returned the error with
// no Report written. The Detail is said in its place, with the encoder's error, as
// one that panics is:
//
//	0 s   SIGTERM: 1 sandbox preserved
//	1 s   step "ublk" returns a Detail holding a channel: OK, and said as unencodable
//	1 s   step "http": OK; the final Report encodes
func TestAStepDetailThatCannotBeEncodedIsSaidNotTheReportLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget, err := deadline.New(60*time.Second, deadline.Config{})
		require.NoError(t, err)
		node := draintest.NewNode()
		node.AddN("sb", 1, time.Second)
		cfg := drain.Config{Budget: budget, Sandboxes: node, Logger: slog.New(slog.DiscardHandler), Steps: []drain.Step{
			drain.NewStep(deadline.Phase{Name: "ublk", Reserve: deadline.Fixed(time.Second)}, func(context.Context) (any, error) {
				return struct{ Done chan struct{} }{make(chan struct{})}, nil
			}),
			drain.NewStep(deadline.Phase{Name: "http", Reserve: deadline.Fixed(time.Second)}, func(context.Context) (any, error) {
				return nil, nil
			}),
		}}
		d, err := drain.New(cfg)
		require.NoError(t, err)
		rep := d.Shutdown(context.Background())

		final, err := json.MarshalIndent(rep, "", "  ")
		require.NoError(t, err, "the final Report encodes")
		assert.Contains(t, string(final), "drain: step ublk's Detail (struct { Done chan struct {} }) could not be encoded: json: unsupported type: chan struct {}")
		assert.Equal(t, drain.OK, rep.Phase("ublk").Result, "what the step did stands")
		assert.Equal(t, drain.OK, rep.Phase("http").Result)
	})
}
