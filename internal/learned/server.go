package learned

import (
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/statedir"
	"github.com/drainkit/drainkit/pause"
)

// LockFile is the file in the state directory whose lock says which
// server owns File: the one that holds it writes File, the others read it.
const LockFile = "learned-rates.lock"

// lockPoll is how often a server that found the lock held tries it again.
const lockPoll = 100 * time.Millisecond

// tryLock takes dir's LockFile without waiting: a *statedir.HeldError
// naming the holder when another process holds it.
func tryLock(dir string) (*statedir.Lock, error) {
	return statedir.TryAcquire(dir, statedir.Config{File: LockFile})
}

// The defaults of Server's zero fields: pause's own.
const (
	defaultCeiling  = 32
	defaultEstimate = time.Second
)

// A Server is the part of a sandbox server's configuration that what it
// learned is kept by and started from: its state directory and its
// -concurrency. Start reads the rates file; the Start it returns builds
// the Preserver's configuration and, after the shutdown, saves what the
// shutdown learned. Its zero value keeps nothing and adapts from 8.
type Server struct {
	// Dir is the server's state directory, where File is kept. Empty
	// keeps nothing: every start is cold and Save writes nothing.
	Dir string
	// Concurrency is the server's -concurrency: n > 0 fixes the limit
	// at n, and what was learned gives only the estimate of a preserve;
	// 0 lets the limit adapt up to Ceiling, from the level the last
	// shutdown learned (checked by its first epoch against the estimate
	// that level was learned with).
	Concurrency int
	// Ceiling is the adaptive limit's ceiling (pause.Config.MaxLimit):
	// a learned level above it is capped. Zero means 32, pause's own.
	Ceiling int
	// Prior is the estimate of one preserve before any was measured (the
	// server's configured one), where a cold start's Estimator starts.
	// Zero means 1 s, pause's own.
	Prior time.Duration
	// Budget is the server's: its grace and margin are recorded in the
	// file at Start when the file's are another's (the last shutdown's,
	// from a server started with another grace since), so that drainkit
	// plan reads this server's. Nil records none.
	Budget *deadline.Budget
	// KubeletGrace is the server's drain.Config.KubeletGrace (zero: none),
	// recorded as Budget's grace is, for drainkit plan to plan the
	// kubelet's own terminations (graceful node shutdown) too.
	KubeletGrace time.Duration
	// Logger says what was loaded, set aside and saved; nil logs nothing.
	Logger *slog.Logger
}

func (s Server) ceiling() int { return cmp0(s.Ceiling, defaultCeiling) }

func (s Server) prior() time.Duration { return cmp0(s.Prior, defaultEstimate) }

func cmp0[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// Start reads what the last shutdown learned (Dir's File) and returns the
// server's start from it. A missing file, or no Dir, is a cold start; so
// is a file that cannot be read or is not valid rates. A missing file and
// an unreadable one are logged with the file: what was learned never fails
// a server's start. A file whose limit is not this
// server's (fixed at another Limit, or adaptive where this one is fixed,
// or the other way round), or whose grace and margin are not its Budget's,
// or whose kubelet grace is not KubeletGrace, is rewritten with this
// server's, keeping what was learned, so that drainkit plan predicts this
// server's next drain; a failure to rewrite it is logged.
//
// The file is one server's at a time: Start takes the flock(2) of Dir's
// LockFile without waiting, and holds it until Save or Close (the kernel
// releases it when the process ends, SIGKILL included, so a dead server
// never holds it); holding it, it removes the temporary files of writes
// of the file a SIGKILL cut short (statedir.Lock.RemoveTemps). A server
// that finds it held (the pod before it still draining: a DaemonSet update
// with maxSurge, a restart whose new pod starts first) does not wait: it logs for whom, starts from the file as
// it is (what the drain before that one learned, still this node's), and
// leaves the file alone; it takes the lock within 100 ms of the holder's
// exit, then reads the file again (what the holder saved is what Save
// keeps), and rewrites the limit then; a file it cannot read then (or
// none) is logged and left as it is, for Save to write anew with no level
// from the file this server read before the holder's drain. Without the
// lock, the holder's Save was overwritten by the newcomer's rewrite, and
// the newcomer's own Save kept the level of the drain before, dropping
// what the holder learned.
func (s Server) Start() *Start {
	st := &Start{srv: s, log: s.Logger}
	if st.log == nil {
		st.log = slog.New(slog.DiscardHandler)
	}
	if s.Dir == "" {
		return st
	}
	path := filepath.Join(s.Dir, File)
	lock, lerr := tryLock(s.Dir)
	held, _ := errors.AsType[*statedir.HeldError](lerr)
	switch {
	case held != nil:
		st.log.Warn("learned rates: another server holds the state directory's file (still draining?); starting from it as it is, not writing it until that server has exited",
			"lock", held.Path, "holder", held.Holder.String())
	case lerr != nil:
		st.log.Warn("learned rates: no lock on the state directory; going on without it", "error", lerr)
	default:
		st.hold(lock)
	}
	r, err := Read(path)
	switch {
	case errors.Is(err, ErrNone):
		// Said, not skipped: a state directory that does not outlive the
		// pod (an emptyDir where a hostPath was meant) starts every server
		// cold, and this line is where that shows.
		st.log.Info("no learned rates yet (the state directory's first server, or it did not outlive the last pod); starting cold",
			"file", path, "prior", s.prior())
	case err != nil:
		st.log.Warn("learned rates unreadable; starting cold", "error", err)
	default:
		st.last = r
		st.log.Info("learned rates loaded", "file", path, "estimate", r.Estimate,
			"observations", r.Observations, "learned_concurrency", r.LearnedLimit, "written", r.Written)
		st.sayUnused(r, path)
	}
	if held == nil {
		st.recordServer(path)
		return st
	}
	st.stop, st.done = make(chan struct{}), make(chan struct{})
	go st.takeOver(path)
	return st
}

// sayUnused says what of r, read at path, the server's Config does not
// start from, beside "learned rates loaded", which names the file's
// estimate and level as they are: an estimate of zero (a server writes its
// Estimator's, never zero: a hand edit or a damaged file), on which Config
// starts cold (learned), and a level above the ceiling, capped (start).
func (st *Start) sayUnused(r *Rates, path string) {
	s := st.srv
	if r.Estimate == 0 {
		st.log.Warn("learned rates hold no estimate of one preserve (estimate_ns 0); starting cold",
			"file", path, "prior", s.prior())
		return
	}
	if r.Observations == 0 && !st.adaptsFromLevel(r) {
		st.log.Warn("learned rates hold no measured estimate (observations 0: the prior of the server that wrote them); starting cold, from this server's prior",
			"file", path, "estimate", r.Estimate, "prior", s.prior())
		return
	}
	if lv, _ := r.Level(); s.Concurrency == 0 && lv > s.ceiling() {
		st.log.Warn("learned level above this server's ceiling; starting at the ceiling",
			"file", path, "learned_concurrency", lv, "ceiling", s.ceiling())
	}
}

// previous returns the rates Save keeps what this shutdown did not learn
// from: the file at path as it is now. Only the server that holds the
// lock writes the file, so what changed in it since this server read it is
// another's word, and the freshest: the server that held the file before
// this one took it over, or an operator, who removes the file to reset what
// was learned (Read's error says to) or edits it. A file removed or not
// readable now keeps nothing, though this server read one at its start
// (that is what the removal or the edit replaced); each case is logged.
func (st *Start) previous(path string) *Rates {
	now, err := Read(path)
	switch {
	case err == nil && (st.last == nil || !now.Written.Equal(st.last.Written)):
		st.log.Info("learned rates: the file was written by another since this server read it; keeping its level",
			"file", path, "written", now.Written, "learned_concurrency", now.LearnedLimit)
	case err == nil && st.last != nil && !sameLevel(now, st.last):
		st.log.Info("learned rates: the file's level was edited since this server read it; keeping the edit",
			"file", path, "learned_concurrency", now.LearnedLimit, "was", st.last.LearnedLimit)
	case errors.Is(err, ErrNone) && st.last != nil:
		st.log.Warn("learned rates: the file this server read at its start was removed since (a reset of what was learned); "+
			"saving what this shutdown learned alone", "file", path, "started_from_written", st.last.Written)
	case err != nil && !errors.Is(err, ErrNone):
		st.log.Warn("learned rates: the file is not readable now; saving what this shutdown learned alone, in its place",
			"file", path, "error", err)
	}
	if err != nil {
		return nil
	}
	return now
}

// sameLevel reports whether a and b hold the same level, with the same
// estimate and mean.
func sameLevel(a, b *Rates) bool {
	al, ae := a.Level()
	bl, be := b.Level()
	return al == bl && ae == be && a.LevelMean() == b.LevelMean()
}

// takeOver tries the lock every lockPoll until it is taken or Save or
// Close stops it; once taken, it reads the file the holder left and
// records this server's limit in it.
func (st *Start) takeOver(path string) {
	defer close(st.done)
	t := time.NewTicker(lockPoll)
	defer t.Stop()
	for {
		select {
		case <-st.stop:
			return
		case <-t.C:
		}
		lock, err := tryLock(st.srv.Dir)
		if _, held := errors.AsType[*statedir.HeldError](err); held {
			continue
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		if err != nil {
			st.log.Warn("learned rates: no lock on the state directory; going on without it", "error", err)
			return
		}
		st.hold(lock)
		r, err := Read(path)
		if err != nil {
			// What this server read before is older than what the holder
			// left: rewriting the file with it would bring back rates that
			// server, or the operator removing the file, replaced. Save
			// writes the file anew, keeping nothing of it (previous).
			st.log.Warn("learned rates: the server before this one has exited, leaving a file this one cannot read; "+
				"leaving it as it is until this server's shutdown writes it", "file", path, "error", err,
				"started_from_written", st.lastWritten())
			return
		}
		st.last = r
		st.log.Info("learned rates: the server before this one has exited; the state directory's file is this server's now",
			"file", path, "written", st.lastWritten(), "learned_concurrency", st.lastLevel())
		st.recordServer(path)
		return
	}
}

// hold makes lock, LockFile's, this server's hold on the file, and
// removes what writes of it cut short left (statedir.Lock.RemoveTemps): a
// Save or a start's rewrite that the kubelet's SIGKILL ended between its
// create and its rename (during its fsync, behind the checkpoints'
// writeback) leaves a temporary file that no later write reuses, one more
// for each on a hostPath that outlives every pod. Under the lock no other
// server writes the file. It reads back the holder record the lock wrote
// (lockMoved compares it).
func (st *Start) hold(lock *statedir.Lock) {
	st.lock = lock
	st.holder, _ = statedir.ReadHolder(filepath.Join(st.srv.Dir, LockFile))
	lock.RemoveTemps(File, st.log)
}

// lockMoved says whether LockFile is no longer the file this server
// locked (removed by hand, or removed and made again by the server that
// took its lock then), and what is there now. flock(2) binds the open
// file, not its name: the kernel's lock stays on the removed file, and the
// next server to start creates another and takes it beside this one.
func (st *Start) lockMoved() (string, bool) {
	if st.lock == nil { // no lock held (Save saving without one): none moved
		return "", false
	}
	now, err := statedir.ReadHolder(filepath.Join(st.srv.Dir, LockFile))
	switch {
	case err != nil:
		return "no lock file", true
	case now.PID != st.holder.PID || now.Owner != st.holder.Owner || !now.Since.Equal(st.holder.Since):
		return now.String(), true
	}
	return "", false
}

func (st *Start) lastWritten() time.Time {
	if st.last == nil {
		return time.Time{}
	}
	return st.last.Written
}

func (st *Start) lastLevel() int {
	if st.last == nil {
		return 0
	}
	lv, _ := st.last.Level()
	return lv
}

// Close stops waiting for the lock and releases it, without saving: for a
// server that ends without a shutdown to save. Save calls it. It is
// idempotent, and does nothing on a nil Start.
func (st *Start) Close() {
	if st == nil {
		return
	}
	if st.stop != nil {
		select {
		case <-st.stop:
		default:
			close(st.stop)
		}
		<-st.done
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.lock != nil {
		st.lock.Release()
		st.lock = nil
	}
}

// recordServer rewrites the file at path when its limit (fixed at Limit, or
// adaptive up to MaxLimit), or its grace and margin (its Budget's) or its
// kubelet grace, or its estimate no preserve measured (observations 0:
// its writer's Prior, where this server starts from its own), is not this
// server's, keeping what was learned:
// drainkit plan predicts the next drain from the file, and the next drain
// is this server's, not the one's that wrote the file (a build before
// max_limit, a fixed -concurrency since changed). The level learned is
// kept as Level reads it before the rewrite. A failure is logged.
func (st *Start) recordServer(path string) {
	if st.last == nil {
		return
	}
	r := *st.last
	if st.srv.Concurrency > 0 {
		r.Limit, r.MaxLimit = st.srv.Concurrency, 0
	} else {
		r.MaxLimit = st.srv.ceiling()
	}
	if b := st.srv.Budget; b != nil {
		r.Grace, r.Margin = b.Grace(), b.Margin()
	}
	r.KubeletGrace = st.srv.KubeletGrace
	if r.Observations == 0 && !st.adaptsFromLevel(st.last) {
		// No preserve measured the file's estimate: it is its writer's Prior, and
		// this server starts from its own (learned), which drainkit plan reads here.
		e := deadline.NewEstimator(st.srv.prior())
		r.Estimate, r.Mean, r.P90 = e.Estimate(), e.Mean(), e.Quantile(0.9)
	}
	if r.Limit == st.last.Limit && r.MaxLimit == st.last.MaxLimit && r.Grace == st.last.Grace && r.Margin == st.last.Margin &&
		r.KubeletGrace == st.last.KubeletGrace && r.Estimate == st.last.Estimate && r.Mean == st.last.Mean && r.P90 == st.last.P90 {
		return
	}
	// The level with its estimate, explicitly: Level reads a file from
	// before LearnedEstimate by its MaxLimit, which this rewrite changes
	// (a level of an adaptive writer would read as none, one a fixed
	// writer kept would read as learned with the fixed drain's estimate).
	r.LearnedLimit, r.LearnedEstimate = st.last.Level()
	r.LearnedMean = st.last.LevelMean()
	if err := r.Write(path); err != nil {
		st.log.Warn("learned rates: this server's limit not recorded", "file", path, "error", err)
		return
	}
	st.log.Info("learned rates: this server's limit and grace recorded for the next drain", "file", path,
		"estimate", r.Estimate, "was_estimate", st.last.Estimate, "limit", r.Limit, "max_limit", r.MaxLimit, "was_limit", st.last.Limit, "was_max_limit", st.last.MaxLimit,
		"grace", r.Grace, "was_grace", st.last.Grace, "kubelet_grace", r.KubeletGrace, "was_kubelet_grace", st.last.KubeletGrace)
}

// A Start is a server's start from what its last shutdown learned, until
// its own shutdown saves what it learned. Its methods are not safe for
// concurrent use: a server calls them from its start and its shutdown.
type Start struct {
	srv  Server
	log  *slog.Logger
	cold bool                // Cold set it aside
	est  *deadline.Estimator // the last Config's, which Save reads
	// from is what the last Config started from, which Cold answers for:
	// the takeover may replace last after it.
	from struct {
		learned bool
		est     time.Duration
		level   int
	}

	stop chan struct{} // closed by Close: takeOver ends
	done chan struct{} // closed when takeOver has ended

	mu     sync.Mutex      // takeOver sets last and lock
	last   *Rates          // what the last shutdown wrote, as this server read it; nil: nothing readable
	lock   *statedir.Lock  // LockFile's: the file is this server's; nil: not (yet)
	holder statedir.Holder // the record lock wrote in LockFile, which lockMoved compares
}

// Config returns the Preserver's Limit, MaxLimit and Estimator (the
// caller sets the other fields). A fixed Concurrency is the Limit, and the
// Estimator starts from the last shutdown's estimate of one preserve, else
// from Prior (and from Prior when no preserve measured that estimate:
// observations 0, its writer's Prior, not this server's). An adaptive one (0) starts from the level learned (Level),
// capped at Ceiling, as pause.Config{Limit: level, MaxLimit: Ceiling},
// with the Estimator from the estimate that level was learned with, which
// its first epoch checks the level against; with no level, cold from 8,
// the Estimator as for a fixed limit. Each call makes a new Estimator, the
// one Save reads.
func (st *Start) Config() pause.Config {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.config()
}

func (st *Start) config() pause.Config {
	prior, level := st.srv.prior(), 0
	if st.from.learned = st.learned(); st.from.learned {
		prior, level = st.start()
	}
	st.from.est, st.from.level = prior, level
	st.est = deadline.NewEstimator(prior)
	if st.srv.Concurrency > 0 {
		return pause.Config{Limit: st.srv.Concurrency, Estimator: st.est}
	}
	return pause.Config{Limit: level, MaxLimit: st.srv.ceiling(), Estimator: st.est}
}

// start returns the estimate and the level (0: none) a Config that uses
// what was learned starts from: the level's own estimate when the limit
// adapts from it, else the last drain's.
func (st *Start) start() (time.Duration, int) {
	if lv, est := st.last.Level(); lv > 0 && st.srv.Concurrency == 0 {
		return est, min(lv, st.srv.ceiling())
	}
	return st.last.Estimate, 0
}

// learned reports whether Config starts from what was learned: an
// estimate some preserve measured, the file's (Observations, which a
// shutdown that measured none keeps: Save) or its level's when the limit
// adapts from it. An estimate no preserve measured is the Prior of the
// server that wrote the file, not this server's: started from, it put an
// operator's earlier word (500 ms) in place of the current one (2 s), and
// the drain lost sandboxes a start with nothing learned kept (row 1474).
func (st *Start) learned() bool {
	if st.cold || st.last == nil || st.last.Estimate <= 0 {
		return false
	}
	return st.last.Observations > 0 || st.adaptsFromLevel(st.last)
}

// adaptsFromLevel reports whether this server's limit adapts from r's
// level, with the estimate measured at it (start).
func (st *Start) adaptsFromLevel(r *Rates) bool {
	lv, _ := r.Level()
	return lv > 0 && st.srv.Concurrency == 0
}

// Cold sets what was learned aside after a Config that did not fit (err,
// logged: a learned estimate whose round no longer fits the grace period,
// shortened since, or the last shutdown's preserves took most of its
// window; the line names the file and the estimate that Config used, the
// level's own when it adapted from one) and returns a cold Config: the
// Estimator from Prior, the limit adaptive from 8 or fixed at Concurrency. The file is rewritten only at a
// shutdown, so failing the start instead would fail every start. It
// returns false when that Config already used nothing learned: then the
// error is the server's configuration's.
func (st *Start) Cold(err error) (pause.Config, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.from.learned {
		return pause.Config{}, false
	}
	// The estimate the Config used (the level's, when it adapted from
	// one), and the file it came from: the log said the last drain's
	// Estimate, another number than the one refused, and no file. Not
	// the file's now: the takeover may have read another since.
	est, level := st.from.est, st.from.level
	st.log.Warn("learned estimate does not fit the grace period; starting cold", "file", filepath.Join(st.srv.Dir, File),
		"estimate", est, "learned_concurrency", level, "prior", st.srv.prior(), "error", err)
	st.cold = true
	return st.config(), true
}

// Save writes what the shutdown learned to Dir's File, for the server's
// next start and for drainkit plan: the estimate of one preserve from the
// last Config's Estimator (when it measured none and started from what was
// learned, the file's estimate with its observations, kept as the level
// is), the concurrency (the one the adaptive limit
// learned best, the last shutdown's when this one learned none, and the
// ceiling when it adapts), the budget's grace and margin, and the steps'
// reserves, evaluated now. rep is the drain's Report (nil: none). A
// failure is logged, never returned: the server's own Report matters more.
//
// Save writes only under the lock (see Start): if another server still
// holds it, this one's drain ran beside that one's, which writes its own,
// and Save writes nothing, logged. The level kept when this shutdown
// learned none is the file's as it is now, whoever changed it since this
// server read it (the server it took the file over from; an operator who
// edited it); none when no file can be read now (removed to reset what was
// learned, or one this build refuses), for what this server read at its
// start is what the removal replaced, and then a shutdown that measured no
// preserve writes Prior as its estimate, not the estimate of the file
// removed. Save releases the lock (Close).
func (st *Start) Save(rep *drain.Report, budget *deadline.Budget, steps []drain.Step) {
	if st.srv.Dir == "" {
		return
	}
	if st.stop != nil { // no more taking over: Save takes the lock itself
		select {
		case <-st.stop:
		default:
			close(st.stop)
		}
		<-st.done
	}
	defer st.Close()
	st.mu.Lock()
	defer st.mu.Unlock()
	path := filepath.Join(st.srv.Dir, File)
	if st.lock == nil {
		lock, err := tryLock(st.srv.Dir)
		switch held, _ := errors.AsType[*statedir.HeldError](err); {
		case held != nil:
			st.log.Warn("learned rates not saved: another server holds the state directory's file and saves its own",
				"lock", held.Path, "holder", held.Holder.String())
			return
		case err != nil:
			st.log.Warn("learned rates: no lock on the state directory; saving without it", "error", err)
		default:
			st.hold(lock)
		}
	}
	if now, moved := st.lockMoved(); moved {
		// Said, not refused: this drain's rates are the freshest, and the
		// other server's Save keeps the file as it finds it (previous).
		st.log.Warn("learned rates: the lock file this server held was removed while it ran (it is never stale: the kernel "+
			"releases it when its server exits); another server may have started beside this one and written the file too; saving",
			"lock", filepath.Join(st.srv.Dir, LockFile), "held_by", st.holder.String(), "now", now)
	}
	prev := st.previous(path)
	r := Rates{Written: time.Now(), Limit: st.srv.Concurrency, Grace: budget.Grace(), Margin: budget.Margin(), KubeletGrace: st.srv.KubeletGrace}
	if st.srv.Concurrency == 0 {
		r.MaxLimit = st.srv.ceiling() // adaptive: drainkit plan predicts the Preserver's start from it
	}
	var preserved *pause.Report
	if rep != nil {
		preserved = rep.Preserve
	}
	switch {
	case prev == nil && st.from.learned && st.est.Count() == 0:
		// Nothing measured, and the file the Estimator started from is gone
		// (reset): its estimate is no more this node's than its level.
		r.FromEstimator(deadline.NewEstimator(st.srv.prior()))
	case prev != nil && st.from.learned && st.est.Count() == 0:
		// Nothing measured: the file's estimate is kept with its observations,
		// as its level is (FromReport). Written as this Estimator's, the
		// estimate it started from with 0 observations, it read as a prior
		// at the next start (learned), and an empty drain lost what was learned.
		r.Estimate, r.Mean, r.P90, r.Observations = prev.Estimate, prev.Mean, prev.P90, prev.Observations
	case st.est != nil:
		r.FromEstimator(st.est)
	}
	r.FromReport(preserved, prev) // a shutdown that learned no concurrency keeps the last one's, with its estimate
	for _, s := range steps {
		r.Steps = append(r.Steps, StepsOf(s.Phase())...)
	}
	if err := r.Write(path); err != nil {
		st.log.Warn("learned rates not saved", "file", path, "error", err)
		return
	}
	st.log.Info("learned rates saved", "file", path, "estimate", r.Estimate, "observations", r.Observations,
		"limit", r.Limit, "learned_concurrency", r.LearnedLimit, "learned_estimate", r.LearnedEstimate, "learned_mean", r.LearnedMean)
}
