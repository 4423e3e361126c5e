package ublk

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/ublkctl"
)

// orderedControl records the commands the step sends, in order.
type orderedControl struct {
	ublkctl.Controller
	mu   sync.Mutex
	sent []string
}

func (c *orderedControl) record(cmd string, id int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = append(c.sent, fmt.Sprintf("%s %d", cmd, id))
}

func (c *orderedControl) DevInfo(ctx context.Context, id int) (ublkctl.DevInfo, error) {
	c.record("GET_DEV_INFO", id)
	return c.Controller.DevInfo(ctx, id)
}

func (c *orderedControl) StopDev(ctx context.Context, id int) error {
	c.record("STOP_DEV", id)
	return c.Controller.StopDev(ctx, id)
}

func (c *orderedControl) DelDev(ctx context.Context, id int) error {
	c.record("DEL_DEV", id)
	return c.Controller.DelDev(ctx, id)
}

// recordOrder makes td's control fallback record its commands in c.
func recordOrder(td *Teardown, c *orderedControl) {
	open := td.cfg.openControl
	td.cfg.openControl = func(ctx context.Context) (ublkctl.Controller, error) {
		ctl, err := open(ctx)
		c.Controller = ctl
		return c, err
	}
}

// The step sends a device STOP_DEV or DEL_DEV only after a GET_DEV_INFO
// of it, and the first command of its Control is a GET_DEV_INFO: on
// 6.1.43 to 6.3, which refuse the ioctl-encoded numbers as unknown, the
// one command ublkctl.Control sends again with its plain number is the
// first it gets an answer to (it keeps the plain numbers after), so the
// step never has a STOP_DEV or a DEL_DEV sent twice, a device deleted and
// another added under its ID between the two sends getting the second.
// Only a GET_DEV_INFO is, which changes nothing (docs/ublk.md, "sent
// again with its plain number"). The three paths that send them: the
// fallback under a hung daemon, after a crashed one, and the last resort.
func TestTheStepsControlAsksGETDEVINFOBeforeItsFirstStopOrDelete(t *testing.T) {
	run := map[string]func(t *testing.T, c *orderedControl){
		"hung daemon": func(t *testing.T, c *orderedControl) {
			f := newFixture(t, 0, 1)
			d := newMemDaemon(f.tree, 0, 1)
			d.hung = true
			defer d.close()
			td, err := New(d, f.config(vulnerable, &memControl{tree: f.tree, d: d}, Config{}))
			require.NoError(t, err)
			recordOrder(td, c)
			_, _, err = runFor(t, td, time.Minute)
			require.NoError(t, err)
		},
		"crashed daemon": func(t *testing.T, c *orderedControl) {
			f := newFixture(t, 0, 1)
			d := newMemDaemon(f.tree, 0, 1)
			d.crashAfter = 1
			defer d.close()
			td, err := New(d, f.config(fixed, &memControl{tree: f.tree, d: d}, Config{}))
			require.NoError(t, err)
			recordOrder(td, c)
			_, _, err = runFor(t, td, time.Minute)
			require.NoError(t, err)
		},
		"last resort": func(t *testing.T, c *orderedControl) {
			f, _, _, td := lastResortRig(t, vulnerable, Config{})
			doomedDaemon(td)
			f.hold(t, 0, "dm-0")
			recordOrder(td, c)
			_, _, _ = runFor(t, td, time.Minute)
		},
	}
	for name, steps := range run {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := &orderedControl{}
				steps(t, c)
				t.Log(c.sent)
				require.NotEmpty(t, c.sent, "the control fallback ran")
				assert.Regexp(t, "^GET_DEV_INFO ", c.sent[0], "the Control's first command")
				asked := map[string]bool{}
				for _, s := range c.sent {
					var cmd string
					var id int
					_, err := fmt.Sscanf(s, "%s %d", &cmd, &id)
					require.NoError(t, err)
					if cmd == "GET_DEV_INFO" {
						asked[fmt.Sprint(id)] = true
						continue
					}
					assert.True(t, asked[fmt.Sprint(id)], "%s before any GET_DEV_INFO of the device: %v", s, c.sent)
				}
			})
		})
	}
}
