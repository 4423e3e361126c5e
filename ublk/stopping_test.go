package ublk

// AgentENV's uvm-ublk-daemon, once a shutdown is under way,
// leaves its accept loop (storage/ublk-daemon/src/server.rs:386-425) but
// keeps its listener bound until stop_all_devices has torn every device
// down (server.rs:428-431): a second {"kind":"shutdown"} connects, is
// written, and is never read nor answered. AgentENV's own server sends the
// first one on SIGTERM (src/bin/server.rs:188, client.rs:488-497), and the
// daemon also starts it when its parent exits (main.rs:325-352), so by the
// time drainkit's daemon step runs the daemon is usually mid-teardown.
// internal/fakeublk does so too now; this model has the daemon's order of
// work inside the test, and its kernel states beside the step's control.
//
// Time: Socket.Request's connection deadline is a real-time netpoll
// deadline, which testing/synctest does not virtualise (a Unix socket read
// in a bubble with a 5 s deadline blocks 5 s of real time with the fake
// clock at 0), so this test runs in real time, scaled down: the daemon's
// teardown 6 x 250 ms, RequestTimeout 200 ms, ExitWait 300 ms. No
// assertion depends on a sleep: the outcome is read from the Report.

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/frame"
	"github.com/drainkit/drainkit/internal/ublkctl"
)

// agentenvDaemon models uvm-ublk-daemon's socket and shutdown as
// server.rs has them: one request per connection; Shutdown is answered
// {"status":"ok"} at once (notify_one, then send_message) and the accept
// loop ends; the listener stays bound (connections queue, unread) while
// the devices are stopped one by one (quiesce: STOP_DEV, queue join, close;
// delete_dev: STOP_DEV, DEL_DEV); then the socket file goes and the
// process exits.
type agentenvDaemon struct {
	path  string
	ln    net.Listener
	tree  *fakeublk.Tree
	ks    *kernelState
	ids   []int
	step  time.Duration
	stopO sync.Once
	stop  chan struct{}
	exitO sync.Once
	exit  chan struct{}
	mu    sync.Mutex
	held  []net.Conn
	kills int
	wg    sync.WaitGroup
}

func startAgentENVDaemon(t *testing.T, tree *fakeublk.Tree, ks *kernelState, step time.Duration, ids ...int) *agentenvDaemon {
	p := socketPath(t, "ublk-daemon.sock")
	ln, err := net.Listen("unix", p)
	require.NoError(t, err)
	d := &agentenvDaemon{path: p, ln: ln, tree: tree, ks: ks, ids: ids, step: step, stop: make(chan struct{}), exit: make(chan struct{})}
	d.wg.Add(2)
	go d.acceptLoop()
	go d.main()
	t.Cleanup(func() { d.die(); d.wg.Wait() })
	return d
}

func (d *agentenvDaemon) acceptLoop() {
	defer d.wg.Done()
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		select {
		case <-d.stop:
			// The real accept loop has ended: this connection sits in the
			// backlog, never read, until the process exits.
			d.mu.Lock()
			d.held = append(d.held, c)
			d.mu.Unlock()
			continue
		default:
		}
		go func() {
			defer c.Close()
			var req map[string]string
			if frame.Read(c, &req) != nil {
				return
			}
			if req["kind"] == "shutdown" {
				d.stopO.Do(func() { close(d.stop) })
				_ = frame.Write(c, map[string]string{"status": "ok"})
			}
		}()
	}
}

func (d *agentenvDaemon) sleep() bool {
	select {
	case <-time.After(d.step):
		return true
	case <-d.exit:
		return false
	}
}

// main is run_with_ready_signal after the loop: stop_all_devices, remove
// the socket, exit.
func (d *agentenvDaemon) main() {
	defer d.wg.Done()
	select {
	case <-d.stop:
	case <-d.exit:
		return
	}
	for _, id := range d.ids {
		if !d.sleep() { // STOP_DEV: del_gendisk, in-flight I/O answered
			return
		}
		_ = d.tree.SetInflight(id, 0, 0)
		_ = d.tree.StopDevice(id)
		d.ks.set(id, ublkctl.StateDead)
		if !d.sleep() { // queue join, close /dev/ublkcN, STOP_DEV again, DEL_DEV
			return
		}
		_ = d.tree.DeleteDevice(id)
	}
	d.die()
}

func (d *agentenvDaemon) die() {
	d.exitO.Do(func() {
		d.ln.Close() // removes the socket file, as remove_file does
		d.mu.Lock()
		for _, c := range d.held {
			c.Close()
		}
		d.mu.Unlock()
		close(d.exit)
	})
}

// askedByTheServer is AgentENV's server's own shutdown_daemon().
func (d *agentenvDaemon) askedByTheServer(t *testing.T) {
	var resp map[string]string
	require.NoError(t, (&Socket{Path: d.path}).Request(t.Context(), map[string]string{"kind": "shutdown"}, &resp))
	require.Equal(t, "ok", resp["status"])
}

// asDaemon is the daemon as the supervisor's -daemon-socket gives it to the
// step: Socket.RequestStop (the code under test), the exit seen as a pidfd
// would see it, and SIGKILL.
func (d *agentenvDaemon) asDaemon() Daemon {
	s := &Socket{Path: d.path}
	return DaemonFuncs{
		StopFunc: s.RequestStop,
		WaitFunc: func(ctx context.Context) error {
			select {
			case <-d.exit:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		KillFunc: func(context.Context) error {
			d.mu.Lock()
			d.kills++
			d.mu.Unlock()
			d.die()
			return nil
		},
	}
}

// Fault (row 383, found by a review against uvm-ublk-daemon's code): the
// server has already asked the daemon to stop (its SIGTERM cleanup, or its
// exit through the daemon's parent pidfd); the daemon is tearing its
// devices down in order, a little longer than RequestTimeout. The step's
// request was never answered (the daemon no longer accepts): RequestStop
// failed with a timeout, the step recorded "the stop request failed", ran
// the control fallback at once (STOP_DEV of every device under the daemon)
// and SIGKILLed the daemon ExitWait after those, mid-teardown. The request
// is now taken as delivered (Unconfirmed), and the daemon stops every
// device itself.
func TestStepInFrontOfAnAgentENVDaemonAlreadyStoppingWaitsForIt(t *testing.T) {
	f := newFixture(t, 0, 1, 2)
	md := newMemDaemon(f.tree) // only for the shared driver state and the events
	ctl := &memControl{tree: f.tree, d: md}
	d := startAgentENVDaemon(t, f.tree, md.kstate, 250*time.Millisecond, 0, 1, 2)
	d.askedByTheServer(t)

	td, err := New(d.asDaemon(), f.config(vulnerable, ctl, Config{
		Reserve: 4 * time.Second, RequestTimeout: 200 * time.Millisecond,
		ExitWait: 300 * time.Millisecond, PollInterval: 20 * time.Millisecond,
	}))
	require.NoError(t, err)
	rep, _, err := runFor(t, td, 20*time.Second)
	require.NoError(t, err)

	d.mu.Lock()
	kills := d.kills
	d.mu.Unlock()
	assert.Empty(t, rep.Daemon.RequestError, "a daemon already stopping did not refuse the request")
	assert.True(t, rep.Daemon.Requested)
	assert.True(t, rep.Daemon.Unconfirmed, "sent, never read")
	assert.True(t, rep.Daemon.Exited)
	assert.Zero(t, kills, "a daemon stopping its devices in order was SIGKILLed mid-teardown")
	assert.Empty(t, md.Events(), "the control fallback ran against a daemon stopping its devices")
	assert.Equal(t, VerdictStopped, rep.Verdict)
}

// The same daemon, not asked before the step: the step's request is the
// first, answered ok, and the daemon stops every device itself: the model
// is not what the test above is about.
func TestStepAsksAnAgentENVDaemonFirst(t *testing.T) {
	f := newFixture(t, 0, 1, 2)
	md := newMemDaemon(f.tree)
	ctl := &memControl{tree: f.tree, d: md}
	d := startAgentENVDaemon(t, f.tree, md.kstate, 250*time.Millisecond, 0, 1, 2)
	td, err := New(d.asDaemon(), f.config(vulnerable, ctl, Config{
		Reserve: 4 * time.Second, RequestTimeout: 200 * time.Millisecond,
		ExitWait: 300 * time.Millisecond, PollInterval: 20 * time.Millisecond,
	}))
	require.NoError(t, err)
	rep, _, err := runFor(t, td, 20*time.Second)
	require.NoError(t, err)
	assert.Empty(t, rep.Daemon.RequestError)
	assert.True(t, rep.Daemon.Requested)
	assert.False(t, rep.Daemon.Unconfirmed, "answered")
	assert.False(t, rep.Daemon.Killed)
	assert.Empty(t, md.Events())
	assert.Equal(t, VerdictStopped, rep.Verdict)
}

// Fault (a review of row 383): ErrUnconfirmed's promise is that "a daemon
// that is in fact hung is covered by the planned fallback, near the
// deadline, and the kill rule". A step with no deadline (Stop runs without
// one: "without a deadline it waits until cancelled") has no planned
// fallback and no kill time. The daemon here was asked by its server and
// then hung at its first device (its teardown's step an hour long); the
// step's own request, never read, was a failed request before row 383 and
// the control fallback stopped every device RequestTimeout after it. Now it
// was taken as delivered and nothing covered it: the step waited, the
// devices live, until its context was cancelled (here 3 s, fifteen
// RequestTimeouts). With no deadline it is a failed request again.
func TestUnconfirmedRequestToAHungDaemonWithNoDeadlineStillFallsBack(t *testing.T) {
	f := newFixture(t, 0, 1, 2)
	md := newMemDaemon(f.tree)
	ctl := &memControl{tree: f.tree, d: md}
	d := startAgentENVDaemon(t, f.tree, md.kstate, time.Hour, 0, 1, 2) // hung at its first device
	d.askedByTheServer(t)

	td, err := New(d.asDaemon(), f.config(vulnerable, ctl, Config{
		RequestTimeout: 200 * time.Millisecond, ExitWait: 300 * time.Millisecond, PollInterval: 20 * time.Millisecond,
	}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background()) // no deadline
	defer cancel()
	time.AfterFunc(3*time.Second, cancel) // a bound on the test, not an assertion
	rep, err := td.Stop(ctx)
	require.NotNil(t, rep)

	assert.False(t, rep.Daemon.Unconfirmed, "with no planned fallback, an unread request is a failed one")
	assert.Contains(t, rep.Daemon.RequestError, "sent, no answer yet")
	assert.NotNil(t, rep.Step("control fallback"), "a hung daemon's devices left live until the step was cancelled: %v", err)
	assert.Contains(t, md.Events(), "STOP_DEV 0")
}
