// Package learned keeps what a sandbox server learned about its own
// shutdown across restarts: the estimate of one preserve, the concurrency
// (at the end of the shutdown, and the one its adaptive limit learned
// best), and the budget and step reserves its plan is made of, in
// STATE_DIR/learned-rates.json. The server writes it after every
// shutdown and starts its Estimator and its adaptive limit from it;
// drainkit plan reads it to predict the next drain with the same
// deadline.Plan rule. A server wires both ends through a Server, from its
// state directory and its -concurrency (0: the adaptive limit):
//
//	start := learned.Server{Dir: stateDir, Concurrency: concurrency, Ceiling: 32,
//		Prior: configured, Logger: logger}.Start()
//	err := build(start.Config()) // the Preserver's Limit, MaxLimit and Estimator
//	if err != nil {
//		if cold, ok := start.Cold(err); ok { // what was learned no longer fits: set aside
//			err = build(cold)
//		}
//	}
//	// ... after the shutdown's Run:
//	start.Save(rep, budget, steps)
//
// Start never fails: a missing or unreadable file is a cold start (the
// Estimator from Prior, the limit from 8), logged; so is, for the
// estimate, a file whose estimate no preserve measured (observations 0:
// its writer's Prior, which a shutdown that measured none writes, and
// which put an operator's earlier word in place of this server's Prior),
// which Start rewrites with this server's Prior; a shutdown that measured
// none after a start from what was learned keeps the file's estimate with
// its observations. An adaptive start takes
// the level the last shutdown learned, capped at the ceiling, with the
// estimate its first epoch checks it against:
// pause.Config{Limit: learned, MaxLimit: 32, Estimator: deadline.NewEstimator(estimate)}.
//
// A server whose limit adapts writes its ceiling too (MaxLimit): drainkit
// plan then builds the Preserver that server starts (pause.Config{Limit:
// LearnedLimit, MaxLimit: MaxLimit}) and reserves with the limit it
// reports at the start, as the server's live plan does, not with Limit.
//
// A file written before LearnedLimit existed (only limit) still reads: its
// LearnedLimit is zero, and the server starts its limit cold, since the
// limit at the end of a shutdown may be a probe or a start that measured
// nothing. A level is kept with the estimate of one preserve measured at
// it (LearnedEstimate): the preserves of the drain that learned it that
// ran beside about that many (from three quarters of it up), each scaled
// to the level so that none counts shorter than it would have taken
// there, with the Estimator's rule; the drain's whole estimate when fewer
// than a round of the level (and than 4) did, no shorter where the drain
// climbed past the level. The plain mean of the same preserves is kept
// beside it (LearnedMean, LevelMean): drainkit plan predicts with it and
// reserves with the estimate, as the drain does. A later drain at a fixed
// limit measures its preserves at that limit and must not hand the level
// on with its own estimate. The
// file says the running server's limit: Start rewrites Limit and MaxLimit
// when the server's -concurrency says otherwise (a file from a build
// before MaxLimit, planned as a fixed limit, or a changed flag), and
// writes the level with the estimate it read it with, so that the
// rewrite changes no level (Level of a file before LearnedEstimate reads
// MaxLimit).
//
// The file is one server's at a time, for the life of that server:
// Start takes the flock(2) of STATE_DIR/learned-rates.lock
// (internal/statedir) without waiting and Save (or Close) releases it;
// the kernel releases it when the process ends however it ends. A
// server that finds it held (the old pod of a DaemonSet update with
// maxSurge, still draining into the same hostPath) starts at once from
// the file as it is, logs whose lock it is, leaves the file alone, and
// takes it over within 100 ms of the holder's exit, reading what the
// holder saved; its own Save keeps the freshest level, and none from
// before the holder's drain when the holder left no file it can read
// (removed to reset what was learned, or one it refuses). The server that
// takes the lock removes the temporary files of writes of the file that a
// SIGKILL cut short (statedir.Lock.RemoveTemps), logged.
//
// The file is the node's memory of its disk, and an operator may reset or
// correct it while a server runs: since only the server holding the lock
// writes it, Save keeps what it finds in it at the shutdown, not what it
// read at its start. Removed (the reset Read's error advises), the next
// file holds only what that shutdown learned, its estimate the server's
// Prior when it measured no preserve; edited, the edit's level is kept
// when the shutdown learned none; unreadable, it is written anew with no
// level. Each case is logged with the file. The lock file is not to be
// removed: the kernel releases the lock when its server exits, so it is
// never stale, and flock(2) binds the open file, not its name: with the
// file removed, the next server makes another and takes its lock beside
// the first. The first then says so at its Save (Warn, naming who holds
// the new one) and saves: the two saves each keep the file as they find
// it, so the next start reads the later drain's level, or the earlier's
// when the later learned none.
package learned
