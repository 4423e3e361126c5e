package drain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/pause"
)

// The defaults never waste time. A server wired with nothing but the
// defaults — a budget from the grace period, a limit of 16, one 2 s step —
// has 30 running sandboxes whose pauses take 1 to 3 s, and a 10 s grace
// period. v0's defaults (a fixed 5 s margin and pauses cut at the preserve
// deadline) ended the preserve phase at SIGTERM + 3 s: 16–18 of 30 kept,
// 7 s left unused before SIGKILL. Now the margin scales with the grace
// (1.5 s) and in-flight pauses finish:
//
//	0 s SIGTERM (no preStop hook) ... preserve until 6.5 s (8.5 s deadline - 2 s step)
//	round 1: 16 pauses of 1-3 s; round 2: 14 more as slots free; all done by ~6 s
//	http step; exit well before the SIGKILL at 10 s
func TestEndToEndDefaultsPreserveEverySandboxWhileTimeIsLeft(t *testing.T) {
	if testing.Short() {
		t.Skip("a real process and a 10 s grace period")
	}
	dir := t.TempDir()
	child, _ := e2eStart(t, dir, e2eRoleEnv+"=defaults")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tl, err := kubeletsim.Terminate(ctx, child, nil, defaultsGrace)
	require.NoError(t, err)
	t.Logf("timeline:\n%s", tl)

	assert.False(t, tl.Killed, "exited before SIGKILL")
	assert.Equal(t, defaultsN, countStateFiles(t, dir), "every sandbox preserved")
	rep := readReport(t, dir)
	assert.Zero(t, rep.Lost())
	require.NoError(t, rep.Err())
	assert.Equal(t, 1500*time.Millisecond, rep.Budget.Margin, "the default margin: a tenth of 10 s, raised to 1.5 s")
	pres := rep.Phase(PhasePreserve)
	require.NotNil(t, pres)
	assert.Equal(t, 6500*time.Millisecond, pres.Deadline.Sub(rep.Budget.Start).Round(10*time.Millisecond),
		"preserve runs until the 8.5 s deadline minus the step's 2 s")
}

const (
	defaultsGrace = 10 * time.Second
	defaultsN     = 30
)

// defaultsServer is the server of TestEndToEndDefaultsPreserveEverySandboxWhileTimeIsLeft:
// defaultsN sandboxes, the i-th pausing for 1 s + 2 s x i/(defaultsN-1).
func defaultsServer(dir string) error {
	pauses := make([]time.Duration, defaultsN)
	for i := range pauses {
		pauses[i] = time.Second + 2*time.Second*time.Duration(i)/(defaultsN-1)
	}
	node := newE2ENode(dir, pauses)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.NewServeMux()}
	budget, err := deadline.New(defaultsGrace, deadline.Config{})
	if err != nil {
		return err
	}
	d, err := New(Config{
		Budget:    budget,
		Sandboxes: node,
		Pause:     pause.Config{Limit: 16},
		Steps:     []Step{HTTPServerStep("http", srv, 2*time.Second)},
	})
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() { _ = srv.Serve(ln) }()
	fmt.Println("listening", ln.Addr())
	rep := d.ServeSignals(context.Background(), sigs)
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return errors.Join(os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644), rep.Err())
}
