// Package draintest lets a server prove its drainkit wiring in a unit test
// that runs in milliseconds: a fake node (a pause.Lister) and fake
// sandboxes whose preserve takes as long as you say and fails as you
// script it. A shutdown spans minutes or hours of the pod's grace period;
// under testing/synctest those minutes are virtual, so the test checks the
// real timeline (when the preStop wait ends, that every sandbox is
// preserved before SIGKILL) without waiting for it.
//
// # The fakes
//
// A Sandbox's Preserve takes Latency (honouring its context) and succeeds,
// or does what its Faults script says for each attempt in order: a
// Transient error (retried by the Preserver), a Permanent one, a Hang that
// ignores its context, a Panic, or a Vanish (the sandbox is gone, which the
// Report counts as vanished, not lost); a preserve of one already preserved
// (a listing that lags) is answered at once, pause.ErrGone, as a server
// answers it, until Node.Add resumes it. A Node lists, in the order they
// were added, the sandboxes neither preserved nor removed; it can fail or
// slow its listings (ListErr, OnList), and it counts the preserves running
// at once. A Disk makes preserves share one device's bandwidth, for
// testing concurrency limits. A field no sandbox or device has (a negative
// Latency, a Disk with no Bytes to write, a Disk with no Bandwidth) fails
// the preserve with an error naming it, never passes for one.
//
// # The synctest recipe
//
// Build everything inside the bubble (the Budget, the Drainer and its
// Gate start timers and contexts that belong to it), relay the signal
// through a channel to ServeSignals instead of sending a real SIGTERM,
// call handlers with httptest.NewRecorder rather than over a real socket
// (network I/O does not let the virtual clock advance), and read the
// Report:
//
//	func TestShutdownPreservesEverySandboxBeforeSIGKILL(t *testing.T) {
//		synctest.Test(t, func(t *testing.T) {
//			node := draintest.NewNode()
//			node.AddN("sb", 40, 2*time.Second) // 40 sandboxes, 2 s per preserve
//			node.Add(&draintest.Sandbox{Name: "flaky", Latency: time.Second,
//				Faults: []draintest.Fault{draintest.Transient}})
//			budget, err := deadline.New(60*time.Second, deadline.Config{}) // the pod's grace period
//			require.NoError(t, err)
//			d, err := drain.New(drain.Config{Budget: budget, Sandboxes: node,
//				Pause: pause.Config{Limit: 8}})
//			require.NoError(t, err)
//
//			sigs := make(chan os.Signal, 1)
//			reports := make(chan *drain.Report, 1)
//			go func() { reports <- d.ServeSignals(t.Context(), sigs) }()
//			start := time.Now()
//			sigs <- syscall.SIGTERM // the kubelet's SIGTERM
//			rep := <-reports
//
//			require.NoError(t, rep.Err())
//			assert.Equal(t, 41, rep.Preserve.Counts[pause.Preserved])
//			// 40 x 2 s at 8 at a time is 10 s of virtual time; the retry adds a jittered backoff.
//			assert.Less(t, time.Since(start), 15*time.Second)
//			assert.Greater(t, rep.Headroom, time.Duration(0)) // before SIGKILL
//		})
//	}
//
// The test above is TestShutdownPreservesEverySandboxBeforeSIGKILL in this
// package's tests and runs in a few milliseconds. The preStop hook fits the
// same way: call d.PreStop() with httptest in a goroutine, wait for the call
// to return (the drain deadline, as the kubelet's httpGet would), then send
// SIGTERM (TestRecipeWithThePreStopHook). A SIGTERM while the call is still
// open means the kubelet's grace ran out, and the budget then expects
// SIGKILL 2 s later.
//
// Guarantees: every fake uses the real clock and no global state, so it
// runs as well outside a bubble (the package Example does) as inside one:
// on a busy machine too, a Disk's write ends when its rates say, as late as
// the goroutine's last wake at most.
// A Preserve honours its context except in a Hang attempt: work (Latency,
// a Disk's write) that its context's deadline comes before is cut, with
// the context's error, however late a busy machine wakes the goroutine,
// never reported done. A Hang attempt blocks for
// HangFor whatever happens (a runtime call that ignores its context); its
// goroutine outlives the Run that abandoned it, so a bubble with a Hang
// must sleep HangFor before it ends.
package draintest
