//go:build linux

package main

import (
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
)

func TestZZScratchPhaseTimedOutFinishesBeforeSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, _ := agentenvDouble(t, 2, fakeagentenv.Config{PauseBase: time.Second, PausePerGiB: time.Second})
		big, err := srv.Create(295 * 1024)
		require.NoError(t, err)
		start := time.Now()
		rep := drainBeforeSIGTERM(t, &http.Client{Transport: handlerTransport{srv.Handler()}}, hooks{
			beforeStep: func() {
				fmt.Println("server step at", time.Since(start), srv.States()[big.SandboxID])
				for srv.States()[big.SandboxID] != fakeagentenv.Paused {
					time.Sleep(100 * time.Millisecond)
				}
				fmt.Println("big paused at", time.Since(start))
			},
		}, "-grace", "300s")
		p := rep.Preserve
		fmt.Println("deadline", p.Deadline.Sub(start), "hard", p.Hard.Sub(start))
		for _, e := range p.Entries {
			fmt.Printf("%s %s %q\n", e.ID, e.Outcome, e.Error)
		}
		fmt.Println("lost", rep.Lost(), srv.States())
		for _, ph := range rep.Phases {
			fmt.Printf("phase %s %s start %v end %v dl %v err %q\n", ph.Name, ph.Result, ph.Start.Sub(start), ph.End.Sub(start), ph.Deadline.Sub(start), ph.Error)
		}
		time.Sleep(time.Hour)
	})
}
