// Package ublkstep is the device-daemon step of drainkit's example servers
// (sandboxd, the supervisor): a ublk teardown whose reserve follows the
// grace the kubelet uses, in the drain plan and inside the step alike.
//
// The servers size the step's reserve from the grace in use (a tenth or a
// twentieth of it, Budget.GraceInUse), read whenever the plan reads it, so
// kubectl delete --grace-period=30 of a server whose -grace is an hour gives
// the step the reserve of a 30 s server. A ublk.Teardown takes its reserve
// once, at ublk.New (Config.Reserve), and lays its own stages (the last
// resort, the daemon's stop, the control fallback, the kill) out from it
// inside the step's window, the holder wait getting only what the window
// has beyond it. Built at start from -grace, its 30 s took every window the
// 30 s deletion's plan gave the step (3 s reserved, up to about 27 s when
// the preserve phase ended early): no holder wait at all, the last resort
// at once, a VMM that was closing its disk SIGKILLed, and a disk held by a
// mount or a stacked device stopped under it, or left held with the daemon
// never asked to stop (docs/faults.md row 1055).
//
// Teardown builds the ublk.Teardown each Stop runs with the reserve's value
// then, which the plan has just read to lay the step's window out:
//
//	td, err := ublkstep.New(daemon, ublk.Config{Logger: logger}, func() time.Duration {
//		return stepReserve(budget.GraceInUse())
//	})
//	steps := []drain.Step{td} // drain.Config.Steps
//
// Guarantees:
//   - The reserve is read at New (ublk.New checks the Config with its
//     value then, naming the field it refuses; a value below zero, which
//     the drain's plan refuses too, fails New naming the reserve), each
//     time the plan reads the Phase's Reserve, and once at the start of
//     each Stop: the stages of a Stop keep the shares of the reserve the
//     plan has just laid the step's window out with, the holder wait the
//     rest of the window. A reserve that reads zero or below at a Stop
//     (deadline.Work with no item) keeps no time of the plan's for the
//     step, and the stages, which still need time to stop the devices
//     before SIGKILL, are laid out from ublk's default (10 s), as a Config
//     with no Reserve; below zero, the Stop ran the start's Teardown
//     (docs/faults.md row 2761).
//   - A deadline moved earlier reaches the Stop in progress (Tighten,
//     which drain and the supervisor's teardown after its server exited
//     call). With the reserve in use shorter then than the one the Stop
//     began with (a shorter deletion read at a SIGTERM after it began) and
//     the daemon not asked to stop yet, the deadline is told to the stages
//     when only the reserve in use is left before it (or when the daemon
//     is asked, if sooner), and the holder wait goes on until then: the
//     stages share that window 3:2:3:2, as a Teardown built with the
//     reserve in use lays them out. Told at once, the reserve the Stop
//     began with (an hour's grace's 30 s) took the whole window of a 30 s
//     deletion (27 s): the last resort at once, the daemon not asked to
//     stop with a disk held (docs/faults.md row 1120). Once the daemon was
//     asked, a move is told at once: the stages left share all the time
//     left. The stop request is seen through a hook ublk calls as it
//     asks the daemon (ublkhook.Hooks.BeforeRequestStop), whatever the
//     daemon's type: the supervisor's ublk.DaemonFuncs and sandboxd's
//     *ublk.Socket alike, which ublk reads the process of by its type, so
//     a wrapper to see the request would hide it; told at once, sandboxd's
//     -grace 1h left a disk held with the daemon never asked to stop
//     (docs/faults.md row 1121). With no daemon, a move is told at once.
//     A reserve in use that reads zero or below counts as ublk's default
//     here too: taken as nothing, the move was told at the deadline (or
//     after it), and the stages got no time (docs/faults.md row 2762).
//     A "reserve in
//     use" step in the Report says when a move was put off, and its
//     Deadline is the moved one, told or not.
//   - A Teardown that ublk.New cannot build again at a Stop (it reads the
//     kernel's release again) leaves the one built at New, whose stages
//     follow the reserve at start, and says so in the ublk Report's Note:
//     the step runs, and its Report names what it ran with.
package ublkstep
