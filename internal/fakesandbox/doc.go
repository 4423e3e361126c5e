// Package fakesandbox provides fake sandboxes and a fake node for tests and
// examples: each Preserve takes a configurable time (honouring its context)
// and can be scripted to fail, per attempt, with a transient error, a
// permanent error, a hang that ignores its context, a panic, or by
// vanishing. A Node lists the sandboxes that still need preserving, counts
// how many preserves run at once, and lets a test add or remove sandboxes
// while a Run is going on.
//
// Everything here uses the real clock, so tests run it under
// testing/synctest to make hours pass in milliseconds. Typical use:
//
//	synctest.Test(t, func(t *testing.T) {
//		node := fakesandbox.NewNode()
//		node.AddN("sb", 200, 2*time.Second)
//		p, _ := pause.New(node, pause.WithLimit(16))
//		ctx, cancel := context.WithTimeout(t.Context(), 600*time.Second)
//		defer cancel()
//		report := p.Run(ctx, time.Time{})
//		_ = report // 200 preserved, about 26 s of virtual time
//	})
//
// Guarantees: a Preserve honours its context except in a Hang attempt, which
// blocks for HangFor whatever happens (a broken runtime call); a Hang's
// goroutine therefore outlives the Run that abandoned it, and a synctest
// bubble must sleep HangFor before it ends.
package fakesandbox
