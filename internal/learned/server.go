package learned

import (
	"errors"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/pause"
)

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
// is a file that cannot be read or is not valid rates, logged: what was
// learned never fails a server's start. A file whose limit is not this
// server's (fixed at another Limit, or adaptive where this one is fixed,
// or the other way round) is rewritten with this server's, keeping what
// was learned, so that drainkit plan predicts this server's next drain; a
// failure to rewrite it is logged.
func (s Server) Start() *Start {
	st := &Start{srv: s, log: s.Logger}
	if st.log == nil {
		st.log = slog.New(slog.DiscardHandler)
	}
	if s.Dir == "" {
		return st
	}
	path := filepath.Join(s.Dir, File)
	r, err := Read(path)
	switch {
	case errors.Is(err, ErrNone):
		return st
	case err != nil:
		st.log.Warn("learned rates unreadable; starting cold", "error", err)
		return st
	}
	st.last = r
	st.log.Info("learned rates loaded", "file", path, "estimate", r.Estimate,
		"observations", r.Observations, "learned_concurrency", r.LearnedLimit, "written", r.Written)
	st.recordLimit(path)
	return st
}

// recordLimit rewrites the file at path when its limit (fixed at Limit, or
// adaptive up to MaxLimit) is not this server's, keeping what was learned:
// drainkit plan predicts the next drain from the file, and the next drain
// is this server's, not the one's that wrote the file (a build before
// max_limit, a fixed -concurrency since changed). The level learned is
// kept as Level reads it before the rewrite. A failure is logged.
func (st *Start) recordLimit(path string) {
	r := *st.last
	if st.srv.Concurrency > 0 {
		r.Limit, r.MaxLimit = st.srv.Concurrency, 0
	} else {
		r.MaxLimit = st.srv.ceiling()
	}
	if r.Limit == st.last.Limit && r.MaxLimit == st.last.MaxLimit {
		return
	}
	// The level with its estimate, explicitly: Level reads a file from
	// before LearnedEstimate by its MaxLimit, which this rewrite changes
	// (a level of an adaptive writer would read as none, one a fixed
	// writer kept would read as learned with the fixed drain's estimate).
	r.LearnedLimit, r.LearnedEstimate = st.last.Level()
	if err := r.Write(path); err != nil {
		st.log.Warn("learned rates: this server's limit not recorded", "file", path, "error", err)
		return
	}
	st.log.Info("learned rates: this server's limit recorded for the next drain", "file", path,
		"limit", r.Limit, "max_limit", r.MaxLimit, "was_limit", st.last.Limit, "was_max_limit", st.last.MaxLimit)
}

// A Start is a server's start from what its last shutdown learned, until
// its own shutdown saves what it learned. Its methods are not safe for
// concurrent use: a server calls them from its start and its shutdown.
type Start struct {
	srv  Server
	log  *slog.Logger
	last *Rates              // what the last shutdown wrote; nil: nothing readable
	cold bool                // Cold set it aside
	est  *deadline.Estimator // the last Config's, which Save reads
}

// Config returns the Preserver's Limit, MaxLimit and Estimator (the
// caller sets the other fields). A fixed Concurrency is the Limit, and the
// Estimator starts from the last shutdown's estimate of one preserve, else
// from Prior. An adaptive one (0) starts from the level learned (Level),
// capped at Ceiling, as pause.Config{Limit: level, MaxLimit: Ceiling},
// with the Estimator from the estimate that level was learned with, which
// its first epoch checks the level against; with no level, cold from 8,
// the Estimator as for a fixed limit. Each call makes a new Estimator, the
// one Save reads.
func (st *Start) Config() pause.Config {
	prior, level := st.srv.prior(), 0
	if st.learned() {
		prior = st.last.Estimate
		if lv, est := st.last.Level(); lv > 0 && st.srv.Concurrency == 0 {
			prior, level = est, min(lv, st.srv.ceiling())
		}
	}
	st.est = deadline.NewEstimator(prior)
	if st.srv.Concurrency > 0 {
		return pause.Config{Limit: st.srv.Concurrency, Estimator: st.est}
	}
	return pause.Config{Limit: level, MaxLimit: st.srv.ceiling(), Estimator: st.est}
}

// learned reports whether Config starts from what was learned.
func (st *Start) learned() bool { return !st.cold && st.last != nil && st.last.Estimate > 0 }

// Cold sets what was learned aside after a Config that did not fit (err,
// logged: a learned estimate whose round no longer fits the grace period,
// shortened since, or the last shutdown's preserves took most of its
// window) and returns a cold Config: the Estimator from Prior, the limit
// adaptive from 8 or fixed at Concurrency. The file is rewritten only at a
// shutdown, so failing the start instead would fail every start. It
// returns false when that Config already used nothing learned: then the
// error is the server's configuration's.
func (st *Start) Cold(err error) (pause.Config, bool) {
	if !st.learned() {
		return pause.Config{}, false
	}
	st.log.Warn("learned estimate does not fit the grace period; starting cold", "estimate", st.last.Estimate,
		"learned_concurrency", st.last.LearnedLimit, "prior", st.srv.prior(), "error", err)
	st.cold = true
	return st.Config(), true
}

// Save writes what the shutdown learned to Dir's File, for the server's
// next start and for drainkit plan: the estimate of one preserve from the
// last Config's Estimator, the concurrency (the one the adaptive limit
// learned best, the last shutdown's when this one learned none, and the
// ceiling when it adapts), the budget's grace and margin, and the steps'
// reserves, evaluated now. rep is the drain's Report (nil: none). A
// failure is logged, never returned: the server's own Report matters more.
func (st *Start) Save(rep *drain.Report, budget *deadline.Budget, steps []drain.Step) {
	if st.srv.Dir == "" {
		return
	}
	r := Rates{Written: time.Now(), Limit: st.srv.Concurrency, Grace: budget.Grace(), Margin: budget.Margin()}
	if st.srv.Concurrency == 0 {
		r.MaxLimit = st.srv.ceiling() // adaptive: drainkit plan predicts the Preserver's start from it
	}
	var preserved *pause.Report
	if rep != nil {
		preserved = rep.Preserve
	}
	if st.est != nil {
		r.FromEstimator(st.est)
	}
	r.FromReport(preserved, st.last) // a shutdown that learned no concurrency keeps the last one's, with its estimate
	for _, s := range steps {
		r.Steps = append(r.Steps, StepsOf(s.Phase())...)
	}
	path := filepath.Join(st.srv.Dir, File)
	if err := r.Write(path); err != nil {
		st.log.Warn("learned rates not saved", "file", path, "error", err)
		return
	}
	st.log.Info("learned rates saved", "file", path, "estimate", r.Estimate, "observations", r.Observations,
		"limit", r.Limit, "learned_concurrency", r.LearnedLimit)
}
