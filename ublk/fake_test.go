package ublk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/ublkctl"
	"github.com/drainkit/drainkit/internal/ublkhook"
)

// memDaemon is an in-process fake daemon over a fakeublk.Tree, for tests
// under testing/synctest: its "work" is time.Sleep, so it runs in virtual
// time.
type memDaemon struct {
	tree *fakeublk.Tree
	ids  []int
	// step is the time per device stop and again per delete.
	step time.Duration
	// hung daemons take the request and do nothing (SIGTERM ignored);
	// mute ones never answer it; crashAfter >= 0 makes the daemon exit
	// after that many devices; failRequest makes RequestStop fail.
	hung bool
	mute bool
	// hangAfterStop stops (removes the disks of) every device, then hangs
	// before deleting them: sysfs shows no disk, the driver says DEAD.
	hangAfterStop bool
	// servesMore daemons serve a device beyond ids: they do not exit
	// once ids are deleted.
	servesMore bool
	kstate     *kernelState
	// retaken are the devices another server adds again the moment this
	// daemon deletes them, with the same ID (the kernel gives a freed ID
	// to the next ADD_DEV): the step never sees the ID free.
	retaken     map[int]bool
	crashAfter  int
	failRequest bool
	cannotKill  bool

	mu     sync.Mutex
	events []string
	exited chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

func newMemDaemon(tree *fakeublk.Tree, ids ...int) *memDaemon {
	return &memDaemon{tree: tree, ids: ids, step: time.Second, crashAfter: -1, exited: make(chan struct{}), kstate: &kernelState{}}
}

// kernelState is the driver's view of device states, shared by memDaemon
// and memControl: a device is LIVE until a STOP_DEV completes.
type kernelState struct {
	mu sync.Mutex
	m  map[int]ublkctl.DevState
}

func (k *kernelState) set(id int, s ublkctl.DevState) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[int]ublkctl.DevState{}
	}
	k.m[id] = s
}

func (k *kernelState) get(id int) ublkctl.DevState {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s, ok := k.m[id]; ok {
		return s
	}
	return ublkctl.StateLive
}

func (d *memDaemon) event(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.events = append(d.events, fmt.Sprintf(format, args...))
}

func (d *memDaemon) Events() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.events...)
}

func (d *memDaemon) exit(why string) {
	d.once.Do(func() { d.event("exit %s", why); close(d.exited) })
}

func (d *memDaemon) RequestStop(ctx context.Context) error {
	d.event("request")
	if d.failRequest {
		return errors.New("connection refused")
	}
	if d.mute {
		<-ctx.Done() // never answers
		return ctx.Err()
	}
	if d.hung {
		return nil
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for i, id := range d.ids {
			if i == d.crashAfter {
				d.exit("crash")
				return
			}
			if !d.sleep(d.step) {
				return
			}
			_ = d.tree.SetInflight(id, 0, 0)
			_ = d.tree.StopDevice(id)
			d.kstate.set(id, ublkctl.StateDead)
			d.event("stop %d", id)
			if d.hangAfterStop {
				continue
			}
			if !d.sleep(d.step) {
				return
			}
			if d.retaken[id] {
				retake(d.tree, id)
			} else {
				_ = d.tree.DeleteDevice(id)
			}
			d.event("delete %d", id)
		}
		if !d.hangAfterStop && !d.servesMore {
			d.exit("done")
		}
	}()
	return nil
}

// sleep returns false if the daemon was killed meanwhile.
func (d *memDaemon) sleep(t time.Duration) bool {
	select {
	case <-time.After(t):
		return true
	case <-d.exited:
		return false
	}
}

// Wait looks at the exit first, as Daemon asks of a Wait given a ctx
// already ended.
func (d *memDaemon) Wait(ctx context.Context) error {
	select {
	case <-d.exited:
		return nil
	default:
	}
	select {
	case <-d.exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *memDaemon) Kill(ctx context.Context) error {
	if d.cannotKill {
		return ErrCannotKill
	}
	d.event("kill")
	d.exit("killed")
	return nil
}

// close waits for the daemon's goroutine; call it before the bubble ends.
func (d *memDaemon) close() {
	d.exit("test end")
	d.wg.Wait()
}

// retake deletes device id from tree and adds another device with its ID
// at once, with new sysfs entries, as the kernel's ADD_DEV of another
// server does (its sysfs entries are new, whatever the file system of a
// fake tree does with freed inode numbers: the old ones are moved aside
// until the new ones exist).
func retake(tree *fakeublk.Tree, id int) {
	name := fmt.Sprintf("ublkc%d", id)
	char := filepath.Join(tree.Root, "devices/virtual/ublk-char", name)
	aside := filepath.Join(tree.Root, "aside-"+name)
	_ = os.Rename(char, aside)
	_ = tree.DeleteDevice(id)
	_ = tree.AddDevice(fakeublk.DeviceSpec{ID: id, Major: 4000, Minor: uint32(id)})
	_ = os.RemoveAll(aside)
}

// memControl is a Controller over a fakeublk.Tree. STOP_DEV removes the
// disk at once (as del_gendisk removes its sysfs entry first), then takes
// stopIn to drain, or never finishes when drainBlocks (a hung daemon
// holds the I/O), and only then is the device DEAD. DEL_DEV removes the
// char device.
type memControl struct {
	tree        *fakeublk.Tree
	d           *memDaemon
	stopIn      time.Duration
	drainBlocks bool
	// blocks are the devices whose STOP_DEV never completes, as one of a
	// hung daemon with I/O in flight: the kernel waits for the daemon to
	// answer it. Its context's end returns it, the others' go on.
	blocks  map[int]bool
	flags   uint64 // reported by DevInfo
	infoErr error  // DevInfo's error, when set
	// runsOn makes a STOP_DEV whose context ends first complete all the
	// same at stopIn, as the driver runs a control command on: the
	// device is DEAD from then on.
	runsOn bool
	// deletedBeforeInfo are the devices someone else deletes (an
	// operator's `ublk del`, the next pod's cleanup) between the step's
	// read of sysfs and its GET_DEV_INFO: the driver has none by then.
	deletedBeforeInfo map[int]bool
	// lastRefHeld are the devices whose removed disk something still has
	// open (a holder the step stopped the device under, a VMM's fd): a
	// DEL_DEV of one removes the device, char device and disk, at once
	// (the driver's ublk_remove), then waits for its last reference,
	// which never goes, as the driver's DEL_DEV does.
	lastRefHeld map[int]bool
	// delDevLocked is a driver of 5.19 to 6.2 (before 0abe39dec065, 6.3):
	// its DEL_DEV of a lastRefHeld device waits for the last reference
	// with wait_event under the global ublk_ctl_mutex, which no signal or
	// cancel interrupts, until lastRefGone is closed.
	delDevLocked bool
	lastRefGone  chan struct{}
}

// DevInfo answers a device that does not exist as ublkctl.Control does:
// an error wrapping ENODEV.
func (c *memControl) DevInfo(ctx context.Context, id int) (ublkctl.DevInfo, error) {
	if c.deletedBeforeInfo[id] {
		delete(c.deletedBeforeInfo, id)
		_ = c.tree.DeleteDevice(id)
	}
	if !c.tree.HasChar(id) {
		return ublkctl.DevInfo{}, fmt.Errorf("ublk: GET_DEV_INFO dev %d: %w", id, syscall.ENODEV)
	}
	if c.infoErr != nil {
		return ublkctl.DevInfo{}, c.infoErr
	}
	return ublkctl.DevInfo{DevID: uint32(id), State: c.d.kstate.get(id), NrHWQueues: 1, QueueDepth: 128, Flags: c.flags}, nil
}

func (c *memControl) StopDev(ctx context.Context, id int) error {
	c.d.event("STOP_DEV %d", id)
	_ = c.tree.StopDevice(id)
	if c.drainBlocks || c.blocks[id] {
		<-ctx.Done()
		return ctx.Err()
	}
	done := time.After(c.stopIn)
	select {
	case <-done:
	case <-ctx.Done():
		if c.runsOn {
			c.d.wg.Add(1)
			go func() {
				defer c.d.wg.Done()
				<-done
				c.d.kstate.set(id, ublkctl.StateDead)
			}()
		}
		return ctx.Err()
	}
	c.d.kstate.set(id, ublkctl.StateDead)
	return nil
}

func (c *memControl) DelDev(ctx context.Context, id int) error {
	c.d.event("DEL_DEV %d", id)
	err := c.tree.DeleteDevice(id)
	if c.lastRefHeld[id] && c.delDevLocked {
		<-c.lastRefGone
		return err
	}
	if c.lastRefHeld[id] {
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

func (c *memControl) Close() error { return nil }

// fixture is a fake sysfs with live devices and an empty procfs.
type fixture struct {
	tree *fakeublk.Tree
	proc string
}

func newFixture(t *testing.T, ids ...int) *fixture {
	t.Helper()
	tree, err := fakeublk.NewTree(t.TempDir())
	require.NoError(t, err)
	for _, id := range ids {
		// Major 4000 is unassigned: no real process can hold these.
		require.NoError(t, tree.AddDevice(fakeublk.DeviceSpec{ID: id, Major: 4000, Minor: uint32(id), Reads: 3, Writes: 1}))
	}
	return &fixture{tree: tree, proc: t.TempDir()}
}

// hold makes a stacked device hold device id (sysfs holders/).
func (f *fixture) hold(t *testing.T, id int, holder string) string {
	t.Helper()
	dir := filepath.Join(f.tree.Root, "block", fmt.Sprintf("ublkb%d", id), "holders")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	p := filepath.Join(dir, holder)
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	return p
}

// partitionHeld adds partition p of device id with a stacked holder.
func (f *fixture) partitionHeld(t *testing.T, id, p int, holder string) {
	t.Helper()
	dir := filepath.Join(f.tree.Root, "block", fmt.Sprintf("ublkb%d", id), fmt.Sprintf("ublkb%dp%d", id, p))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "holders"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dev"), []byte(fmt.Sprintf("4001:%d\n", p)), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "holders", holder), nil, 0o644))
}

// config is c over f's fake sysfs and procfs, with release as the kernel
// and, when ctl is not nil, ctl as the control fallback's Controller; nil
// is a fake kernel with no control device (unless c names a ControlPath of
// its own). Before, nil left the fallback at /dev/ublk-control, the host's:
// TestPartitionHolderCounts's last resort opened it (strace), and on a
// host with ublk_drv its STOP_DEV for the fake device 0 would have stopped
// the host's device 0.
func (f *fixture) config(release string, ctl *memControl, c Config) Config {
	c.hooks = ublkhook.Hooks{SysfsRoot: f.tree.Root, ProcfsRoot: f.proc, KernelRelease: release}
	switch {
	case ctl != nil:
		c.hooks.OpenControl = func(context.Context) (ublkctl.Controller, error) { return ctl, nil }
	case c.ControlPath == "":
		c.hooks.OpenControl = noControl
	}
	return c
}

// noControl is the control fallback of a fake kernel with no control
// device, as ublkctl.Open of a missing one fails.
func noControl(context.Context) (ublkctl.Controller, error) {
	return nil, fmt.Errorf("%w: the test's fake kernel has no control device", ublkctl.ErrNoControl)
}
