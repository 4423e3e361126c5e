package lastreport

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/drainprogress"
	"github.com/drainkit/drainkit/internal/durable"
)

// Every is how often at most a Progress rewrites its account for the node's counts
// alone (a write and an fsync each: see docs/faults.md row 1510).
const Every = time.Second

// Unfinished is what the account of a drain still running says beside the Report as it
// stands, as the "unfinished" member of the file: a reader that finds it knows the
// drain did not finish (a SIGKILL before the final Report, whose file has none).
type Unfinished struct {
	At      time.Time         `json:"at"`              // when this account was written
	Phase   string            `json:"phase,omitempty"` // the phase running then
	Counted int               `json:"counted"`         // the sandboxes the drain's last count saw running
	Node    map[string]int    `json:"node,omitempty"`  // the server's own count then: sandboxes by state
	Plan    []deadline.Window `json:"plan,omitempty"`  // the windows of the phase running and those after, as planned then
}

// A Progress keeps a drain's account at path while the drain runs: from the drain's
// start (the preStop call or SIGTERM) the file is this drain's Report as it stands,
// marked Unfinished, rewritten at each phase's end and, as the node's counts change, at
// most once every Every; the final Report, written by Finish after Stop, replaces it.
// After a SIGKILL mid-drain the file says: this drain, unfinished, what was known then.
//
//	p := lastreport.Follow(&cfg, path, 0o600, logger, nodeCounts)
//	d, err := drain.New(cfg)
//	p.Start(d)
//	rep := d.Shutdown(ctx)
//	p.Stop()
//	err = p.Finish(finalData)
type Progress struct {
	path   string
	perm   os.FileMode
	logger *slog.Logger
	node   func() map[string]int
	write  func(path string, data []byte, perm os.FileMode) error // the rewrites' write: durable.WriteFile

	member string // the account nests in this member of the file ("drain"), "" for none

	mu      sync.Mutex
	started bool            // Start was called
	rep     json.RawMessage // the Report as the drain last told it; nil before
	next    string          // the phase it said runs next
	wrote   bool            // the file at path is this drain's account: run wrote it

	told chan struct{} // the drain told a new Report
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Follow makes a Progress for the drain that cfg (before drain.New) builds: its account
// at path (perm before the umask), its lines to logger (nil: slog.Default()), the
// server's own count of its sandboxes by state from node (nil: none; called once every
// Every and at each phase's end, it must be cheap).
func Follow(cfg *drain.Config, path string, perm os.FileMode, logger *slog.Logger, node func() map[string]int) *Progress {
	if logger == nil {
		logger = slog.Default()
	}
	p := &Progress{path: path, perm: perm, logger: logger, node: node, write: durable.WriteFile,
		told: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	drainprogress.Set(cfg, p.tell)
	return p
}

// tell keeps the Report the drain tells as it stands (encoded here: it is valid only
// during the call) and wakes the writer.
func (p *Progress) tell(rep any, next string) {
	data, err := json.Marshal(rep)
	if err != nil {
		p.logger.Warn("the drain's account as it stands could not be encoded", "error", err)
		return
	}
	p.mu.Lock()
	p.rep, p.next = data, next
	p.mu.Unlock()
	select {
	case p.told <- struct{}{}:
	default:
	}
}

// In makes the account the member of a JSON object, {"member": account}, for a file
// whose finished Report holds the drain's there (the supervisor's "drain"), where
// drainkit report reads it. Call it before Start. It returns p.
func (p *Progress) In(member string) *Progress {
	p.member = member
	return p
}

// Start follows d, the Drainer made from the Config given to Follow, until Stop (a nil
// Progress: none): at
// its termination's start it writes the account (replacing the earlier shutdown's, by
// Write's rule), then rewrites it as the drain goes. Call it as the server starts:
// it first removes, logged, what writes of the file a SIGKILL cut short left
// (durable.RemoveGoneTemps), leaving alone a write in progress (another server's).
func (p *Progress) Start(d *drain.Drainer) {
	if p == nil { // no file to keep the account in
		return
	}
	p.mu.Lock()
	p.started = true
	p.mu.Unlock()
	p.removeGoneTemps()
	go p.run(d)
}

// removeGoneTemps removes what writes of p's file left when a SIGKILL cut them
// between their create and their rename (durable.RemoveGoneTemps: a temporary file
// as large as the account, one more for each, for ever). No lock every writer
// takes keeps others off the file (the supervisor's -report lock, row 2163, keeps
// off only another supervisor, and a file system without flock has none; another
// server's drain may write it), so only the files of writes that are over go: a
// write in progress holds its own.
func (p *Progress) removeGoneTemps() {
	removed, err := durable.RemoveGoneTemps(p.path)
	if len(removed) > 0 {
		p.logger.Info("removed what a write cut short left (a crash, a SIGKILL between its create and its rename)",
			"file", p.path, "removed", removed)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) { // no directory: nothing was left in it
		p.logger.Warn("what a write cut short left could not all be removed", "file", p.path, "error", err)
	}
}

// Stop ends the rewrites, dropping one not begun (a phase's end told just before: the
// final Report comes next), and waits for one in progress (none before Start), so that the final Report, which
// the caller writes next, is the last written.
func (p *Progress) Stop() {
	if p == nil {
		return
	}
	p.once.Do(func() { close(p.stop) })
	p.mu.Lock()
	started := p.started
	p.mu.Unlock()
	if started {
		<-p.done
	}
}

// run writes the account at the termination's start and rewrites it whenever the drain
// tells a new Report, or the node's counts changed at most once every Every.
func (p *Progress) run(d *drain.Drainer) {
	defer close(p.done)
	if !p.begun(d) {
		return
	}
	began := time.Now()
	counts := p.counts()
	data := p.account(d, began, counts)
	if err := write(p.path, data, p.perm, p.logger, account); err != nil {
		p.logger.Warn("the drain's account at its start could not be written: a SIGKILL before its Report leaves none", "file", p.path, "error", err)
	} else {
		p.setWrote()
	}
	poll := time.NewTimer(Every)
	defer poll.Stop()
	warned := false
	for {
		var now map[string]int
		select {
		case <-p.stop:
			return
		case <-p.told:
			now = p.counts()
		case <-poll.C:
			poll.Reset(Every)
			if now = p.counts(); maps.Equal(now, counts) {
				continue
			}
		}
		counts = now
		err := p.write(p.path, p.account(d, began, counts), p.perm)
		if err == nil {
			p.setWrote()
		} else if !warned {
			warned = true // the account written before stays: this drain's, as it was then
			p.logger.Warn("the drain's account could not be rewritten: the file holds it as it was earlier", "file", p.path, "error", err)
		}
		poll.Reset(Every)
	}
}

// begun waits for d's termination to start: Shutdown (SIGTERM), or the preStop call,
// which anchors the budget before the drain tells anything (it tells at SIGTERM), seen
// as the budget's change (deadline.Budget.Changed). It returns false when Stop came
// first.
func (p *Progress) begun(d *drain.Drainer) bool {
	b := d.Budget()
	for {
		changed := b.Changed() // before the read: a change between the two is not missed
		if b.Anchored() {
			return true
		}
		select {
		case <-d.Terminating():
			return true
		case <-p.stop:
			return false
		case <-changed:
		}
	}
}

// counts returns the node's counts, nil without a node function.
func (p *Progress) counts() map[string]int {
	if p.node == nil {
		return nil
	}
	return p.node()
}

// account returns the file's content now: the Report as the drain last told it (before
// it told one: its start and budget, began at began), with Unfinished first.
func (p *Progress) account(d *drain.Drainer, began time.Time, counts map[string]int) []byte {
	p.mu.Lock()
	rep, next := p.rep, p.next
	p.mu.Unlock()
	budget := d.Budget().State()
	if rep == nil {
		next = drain.PhaseGate // SIGTERM: the gate closes at once
		if budget.Anchor == deadline.AnchorPreStop {
			next = drain.PhaseDrain // the preStop wait
		}
		rep, _ = json.Marshal(&drain.Report{Start: began, Budget: budget})
	}
	u := Unfinished{At: time.Now(), Phase: next, Counted: d.Running(), Node: counts}
	if next != "" {
		u.Plan = d.Plan().Windows(next)
	}
	head, err := json.Marshal(struct {
		Unfinished Unfinished `json:"unfinished"`
	}{u})
	if err != nil || len(rep) < 2 {
		return rep
	}
	// {"unfinished":{...}} and {"start":...} make {"unfinished":{...},"start":...}.
	out := append(head[:len(head)-1:len(head)-1], ',')
	out = append(out, rep[1:]...)
	if p.member != "" {
		name, _ := json.Marshal(p.member)
		out = slices.Concat([]byte("{"), name, []byte(":"), out, []byte("}"))
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, out, "", "  "); err != nil {
		return out
	}
	return append(buf.Bytes(), '\n')
}

// ByState returns a node function for Follow: the count of each of states by count
// (a sandbox node's Count), those with none left out.
func ByState(count func(state string) int, states ...string) func() map[string]int {
	return func() map[string]int {
		counts := map[string]int{}
		for _, state := range states {
			if n := count(state); n > 0 {
				counts[state] = n
			}
		}
		return counts
	}
}

// setWrote records that the file at path is this drain's account.
func (p *Progress) setWrote() {
	p.mu.Lock()
	p.wrote = true
	p.mu.Unlock()
}

// Finish stops p (Stop) and writes data, the drain's final Report, at its path, by
// Write's rule, but for the file there once p wrote this drain's account: that is no
// earlier shutdown's, and when data cannot be written it stays, as last written, said
// unfinished (a file system full or remounted read-only mid-drain); on a full file
// system it is removed for data to be written in its space, and written back when data
// does not fit there either. The error is the write's, logged at ERROR. A nil Progress
// (no file) writes nothing.
func (p *Progress) Finish(data []byte) error {
	if p == nil {
		return nil
	}
	p.Stop()
	p.mu.Lock()
	wrote := p.wrote
	p.mu.Unlock()
	if !wrote { // the file is none, or an earlier shutdown's
		return Write(p.path, data, p.perm, p.logger)
	}
	werr := durable.WriteFile(p.path, data, p.perm)
	if werr == nil {
		return nil
	}
	if errors.Is(werr, syscall.ENOSPC) {
		written, gone := p.inItsSpace(data, werr)
		if written {
			return nil
		}
		if gone {
			return werr
		}
	}
	p.logger.Error("the Report could not be written: the file holds this drain's account as last written, unfinished", "file", p.path, "error", werr)
	return werr
}

// inItsSpace writes data in the space this drain's account at path frees, and reports
// whether it did, and whether the account, read before and written back when data does
// not fit either, is gone (said at ERROR).
func (p *Progress) inItsSpace(data []byte, werr error) (written, gone bool) {
	account, err := os.ReadFile(p.path)
	if err != nil || os.Remove(p.path) != nil {
		return false, false
	}
	if durable.WriteFile(p.path, data, p.perm) == nil {
		p.logger.Warn("the Report written in the space of this drain's account, removed first: the file system is full", "file", p.path, "error", werr)
		return true, false
	}
	if err := durable.WriteFile(p.path, account, p.perm); err != nil {
		p.logger.Error("the Report could not be written, nor this drain's account, removed for its space, written back: the file is gone",
			"file", p.path, "error", werr, "account_error", err)
		return false, true
	}
	return false, false
}
