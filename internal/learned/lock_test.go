//go:build unix

package learned_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/durable"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/internal/statedir"
	"github.com/drainkit/drainkit/pause"
)

// serverHelper is a server's life as far as its learned rates go, in a
// process of its own: "helper:server DIR CONCURRENCY LEARNED LOG". It
// starts from DIR (learned.Server.Start), says "started" on stdout, and at
// the line "save" on stdin saves a drain that learned LEARNED (0: none),
// says "saved" and exits. Its log goes to the file LOG, written before it
// says anything on stdout (a pipe for stderr could lag behind stdout).
func serverHelper(args []string) int {
	conc, _ := strconv.Atoi(args[1])
	lv, _ := strconv.Atoi(args[2])
	f, err := os.Create(args[3])
	if err != nil {
		return 2
	}
	defer f.Close()
	log := slog.New(slog.NewTextHandler(f, nil))
	st := learned.Server{Dir: args[0], Concurrency: conc, Logger: log}.Start()
	st.Config().Estimator.Observe(time.Second)
	fmt.Println("started")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() != "save" {
			continue
		}
		budget, _ := deadline.New(30*time.Second, deadline.Config{})
		st.Save(&drain.Report{Preserve: &pause.Report{Limit: 8, LearnedLimit: lv}}, budget, nil)
		fmt.Println("saved")
		return 0
	}
	return 1
}

// A helper server process, its stdin, its stdout lines and its log file.
type helperServer struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	log   string
}

func startServer(t *testing.T, dir string, concurrency, learnedLevel int) *helperServer {
	t.Helper()
	h := &helperServer{lines: make(chan string, 8)}
	f, err := os.CreateTemp(t.TempDir(), "log-")
	require.NoError(t, err)
	h.log = f.Name()
	f.Close()
	h.cmd = exec.Command(os.Args[0], "helper:server", dir, strconv.Itoa(concurrency), strconv.Itoa(learnedLevel), h.log)
	h.cmd.Stderr = os.Stderr
	h.in, err = h.cmd.StdinPipe()
	require.NoError(t, err)
	out, err := h.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, h.cmd.Start())
	t.Cleanup(func() { _ = h.cmd.Process.Kill(); _ = h.cmd.Wait() })
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	h.expect(t, "started")
	return h
}

func (h *helperServer) logs() string {
	b, _ := os.ReadFile(h.log)
	return string(b)
}

func (h *helperServer) expect(t *testing.T, line string) {
	t.Helper()
	select {
	case got, ok := <-h.lines:
		require.True(t, ok, "the helper exited before %q; its log:\n%s", line, h.logs())
		require.Equal(t, line, got)
	case <-time.After(30 * time.Second): // a hung helper, not a timing
		t.Fatalf("no %q from the helper; its log:\n%s", line, h.logs())
	}
}

// save makes the helper save and waits for its exit.
func (h *helperServer) save(t *testing.T) {
	t.Helper()
	_, err := io.WriteString(h.in, "save\n")
	require.NoError(t, err)
	h.expect(t, "saved")
	require.NoError(t, h.cmd.Wait(), h.logs())
}

// Two servers on one state directory, as during a DaemonSet update with
// maxSurge: the old one (adaptive) is draining when the new one (fixed at
// 8) starts. The new one finds the file held: it starts from the file as
// it is and leaves it alone (its start used to rewrite the limit over what
// the old one was about to save, or after it); once the old one has saved
// what its drain learned (level 16) and exited, the new one takes the file
// within 100 ms, records its own limit in it keeping that level, and its
// own Save, after a drain that learned none, keeps 16, not the 4 of the
// drain before (its start's read), as it did.
func TestANewServerLeavesTheLearnedRatesToTheOneStillDraining(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, learned.File)
	before := learned.Rates{Written: time.Now().Add(-time.Hour), Estimate: time.Second, Limit: 4, LearnedLimit: 4, LearnedEstimate: time.Second, MaxLimit: 32}
	require.NoError(t, before.Write(path))

	old := startServer(t, dir, 0, 16)
	neu := startServer(t, dir, 8, 0)
	assert.Contains(t, neu.logs(), "another server holds the state directory's file")
	assert.Contains(t, neu.logs(), fmt.Sprintf("pid %d", old.cmd.Process.Pid), "it says for whom")
	got, err := learned.Read(path)
	require.NoError(t, err)
	assert.Equal(t, 32, got.MaxLimit, "the newcomer left the file alone while the old one holds it")
	assert.Equal(t, 4, got.Limit)

	old.save(t)
	got, err = learned.Read(path)
	require.NoError(t, err)
	assert.Equal(t, 16, got.LearnedLimit, "the old one saved what its drain learned")

	require.Eventually(t, func() bool {
		got, err := learned.Read(path)
		return err == nil && got.MaxLimit == 0 && got.Limit == 8
	}, 30*time.Second, 10*time.Millisecond, "the newcomer took the file once the old one exited and recorded its limit:\n%s", neu.logs())
	got, err = learned.Read(path)
	require.NoError(t, err)
	level, _ := got.Level()
	assert.Equal(t, 16, level, "the rewrite keeps the old one's level")

	neu.save(t)
	got, err = learned.Read(path)
	require.NoError(t, err)
	assert.Equal(t, 16, got.LearnedLimit, "the newcomer's drain learned none: the old one's level stays")
	assert.Equal(t, 8, got.Limit)
	assert.True(t, strings.Contains(neu.logs(), "the state directory's file is this server's now"), neu.logs())
}

// besideAHolder starts a server on dir (fixed at concurrency; 0: adaptive) while this
// process holds the rates file's lock as another server would: the holder, for the test
// to release. The server's log is the buffer; it is closed when the test ends. Called in
// synctest's bubble, its takeover polls on the bubble's clock.
func besideAHolder(t *testing.T, dir string, concurrency int) (*statedir.Lock, *learned.Start, *bytes.Buffer) {
	t.Helper()
	holder, err := statedir.TryAcquire(dir, statedir.Config{File: learned.LockFile})
	require.NoError(t, err)
	var logs bytes.Buffer
	st := learned.Server{Dir: dir, Concurrency: concurrency, Logger: slog.New(slog.NewTextHandler(&logs, nil))}.Start()
	t.Cleanup(st.Close)
	return holder, st, &logs
}

// A server that never gets the file (the holder still drains when it
// saves) writes nothing, logged, and does not wait.
func TestSaveWhileAnotherHoldsTheFileWritesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, learned.File)
	holder := startServer(t, dir, 0, 16)
	var logs bytes.Buffer
	st := learned.Server{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))}.Start()
	budget, err := deadline.New(30*time.Second, deadline.Config{})
	require.NoError(t, err)
	st.Config()
	st.Save(&drain.Report{Preserve: &pause.Report{Limit: 8, LearnedLimit: 2}}, budget, nil)
	assert.Contains(t, logs.String(), "learned rates not saved: another server holds")
	_, err = learned.Read(path)
	assert.ErrorIs(t, err, learned.ErrNone, "nothing written beside the holder")
	holder.save(t)
	got, err := learned.Read(path)
	require.NoError(t, err)
	assert.Equal(t, 16, got.LearnedLimit)
}

// The server before this one exits leaving a rates file this one cannot
// read (a build that writes what this one refuses, the file removed to
// reset what was learned): the takeover says so, naming the file and why,
// and leaves the file as it is. It used to drop the error in silence and
// rewrite the file with the rates it had read before that server's drain,
// bringing back what that server, or the operator, had replaced.
func TestTakeOverOfAnUnreadableFileSaysSoAndLeavesIt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, learned.File)
	before := learned.Rates{Written: time.Now().Add(-time.Hour), Estimate: time.Second, Limit: 4}
	require.NoError(t, before.Write(path))
	synctest.Test(t, func(t *testing.T) {
		holder, st, logs := besideAHolder(t, dir, 8)
		assert.Equal(t, time.Second, st.Config().Estimator.Estimate(), "started from the file as it was")

		left := []byte(`{"written": "2026-12-05T00:00:00Z", "estimate_ns": -1}` + "\n")
		require.NoError(t, os.WriteFile(path, left, 0o644))
		require.NoError(t, holder.Release())
		time.Sleep(time.Second) // the takeover polls every 100 ms
		synctest.Wait()

		got, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, string(left), string(got), "the file the server before left, left alone")
		assert.Contains(t, logs.String(), "estimate_ns is negative", "the takeover says why:\n%s", logs.String())
		assert.Contains(t, logs.String(), "file="+path)
	})
}

// A server starts cold beside the one still draining (no file yet), its
// Config does not fit (its own flags), and meanwhile the holder saved a
// learned estimate and exited, which the takeover read. Cold answers for
// the Config that was refused: it used nothing learned, so the error is
// the server's configuration's. It used to answer for the file the
// takeover read since: it said a learned estimate the start never used
// did not fit, and handed back the same Config as a cold one.
func TestColdAnswersForTheConfigRefusedNotTheFileTakenOverSince(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, learned.File)
	synctest.Test(t, func(t *testing.T) {
		holder, err := statedir.TryAcquire(dir, statedir.Config{File: learned.LockFile})
		require.NoError(t, err)
		var logs bytes.Buffer
		st := learned.Server{Dir: dir, Prior: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}.Start()
		defer st.Close()
		assert.Equal(t, 2*time.Second, st.Config().Estimator.Estimate(), "cold: nothing learned yet")

		saved := learned.Rates{Written: time.Now(), Estimate: 9 * time.Second, Limit: 8, LearnedLimit: 16, LearnedEstimate: 9 * time.Second, MaxLimit: 32}
		require.NoError(t, saved.Write(path))
		require.NoError(t, holder.Release())
		time.Sleep(time.Second) // the takeover polls every 100 ms
		synctest.Wait()
		require.Contains(t, logs.String(), "the state directory's file is this server's now")

		_, ok := st.Cold(errors.New("the flags do not fit"))
		assert.False(t, ok, "the refused Config used nothing learned: the error is the configuration's")
		assert.NotContains(t, logs.String(), "learned estimate does not fit", logs.String())
	})
}

// The server before this one exits leaving no rates file this one can
// read: the operator removed it to reset what was learned (the fix Read's
// error gives), or it left one this build refuses. The takeover leaves
// it alone (row 371's test), and this server's Save, after a drain that
// learned no level (a fixed -concurrency), writes the file anew with no
// level: the level it read at its start, from before that server's
// drain, is what the removal or that server replaced. It used to keep
// that level, bringing back the level 4 the reset had removed.
func TestSaveAfterATakeOverOfNoReadableFileKeepsNoStaleLevel(t *testing.T) {
	for name, leave := range map[string]func(t *testing.T, path string){
		"removed": func(t *testing.T, path string) { require.NoError(t, os.Remove(path)) },
		"unreadable": func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, []byte(`{"written": "2026-12-05T00:00:00Z", "estimate_ns": -1}`+"\n"), 0o644))
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, learned.File)
			before := learned.Rates{Written: time.Now().Add(-time.Hour), Estimate: time.Second, Limit: 4,
				LearnedLimit: 4, LearnedEstimate: time.Second, MaxLimit: 32}
			require.NoError(t, before.Write(path))
			synctest.Test(t, func(t *testing.T) {
				holder, st, logs := besideAHolder(t, dir, 8)
				st.Config().Estimator.Observe(2 * time.Second)

				leave(t, path)
				require.NoError(t, holder.Release())
				time.Sleep(time.Second) // the takeover polls every 100 ms
				synctest.Wait()
				require.Contains(t, logs.String(), "leaving it as it is until this server's shutdown writes it")

				budget, err := deadline.New(30*time.Second, deadline.Config{})
				require.NoError(t, err)
				st.Save(&drain.Report{Preserve: &pause.Report{Limit: 8}}, budget, nil)
				got, err := learned.Read(path)
				require.NoError(t, err, "Save wrote the file anew:\n%s", logs.String())
				level, est := got.Level()
				assert.Zero(t, level, "no level brought back from before the server that exited")
				assert.Zero(t, est)
				assert.Equal(t, 8, got.Limit)
				assert.Equal(t, 2*time.Second, got.Estimate, "this drain's estimate")
			})
		})
	}
}

// A Save cut by the kubelet's SIGKILL between its write's create and
// rename (durable.WriteFile) leaves its temporary file beside the rates
// file, which nothing wrote again: one more for every drain cut there, on
// a hostPath that outlives every pod. The server that takes the file's
// lock (at its start, or taking it over from the server before it)
// removes them, and says so; it used to leave them for ever. A file that
// is not such a write's is left alone.
func TestTheServerTakingTheFileRemovesWhatACutSaveLeft(t *testing.T) {
	cut := func(t *testing.T, dir string) string {
		t.Helper()
		// As a SIGKILL between create and rename leaves it.
		tmp := filepath.Join(dir, "."+learned.File+".1x2y3z"+durable.TempSuffix)
		require.NoError(t, os.WriteFile(tmp, []byte(`{"written": "2026-12-05T00:00:00Z", "esti`), 0o644))
		return tmp
	}
	other := func(t *testing.T, dir string) string {
		t.Helper()
		p := filepath.Join(dir, ".notes"+durable.TempSuffix)
		require.NoError(t, os.WriteFile(p, nil, 0o644))
		return p
	}
	t.Run("at its start", func(t *testing.T) {
		dir := t.TempDir()
		tmp, keep := cut(t, dir), other(t, dir)
		var logs bytes.Buffer
		st := learned.Server{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))}.Start()
		defer st.Close()
		assert.NoFileExists(t, tmp, "what the cut Save left is removed")
		assert.FileExists(t, keep)
		assert.Contains(t, logs.String(), "removed what a write cut short left", logs.String())
		assert.Contains(t, logs.String(), tmp)
	})
	t.Run("taking it over", func(t *testing.T) {
		dir := t.TempDir()
		synctest.Test(t, func(t *testing.T) {
			holder, _, logs := besideAHolder(t, dir, 0)
			tmp := cut(t, dir) // the holder's Save, cut by its SIGKILL
			assert.FileExists(t, tmp, "the holder's: left alone while it holds the file")
			require.NoError(t, holder.Release())
			time.Sleep(time.Second) // the takeover polls every 100 ms
			synctest.Wait()
			assert.NoFileExists(t, tmp, "removed once this server holds the file:\n%s", logs.String())
		})
	})
}

// The file removed, edited or broken by hand while the server that holds
// it runs: only that server writes the file (its lock), so a change since
// its start is an operator's, and its Save keeps it. A removal resets what
// was learned (the fix Read's error gives, and what a takeover already
// does with a removed file, row 870): a drain that learned no level (a
// fixed -concurrency) writes none, and one that measured no preserve
// writes the server's prior as its estimate, not the removed file's. An
// edit of the level (16 to 4, its "written" left as it was) is kept, and a
// file broken by an edit is written anew with no level. Save used to keep
// the rates the server read at its start whenever the file now was not
// newer by its "written": the removed level 16, with its 8 s estimate,
// came back, and so did the 16 the operator edited down to 4.
func TestSaveKeepsWhatAnOperatorDidToTheFileWhileTheServerRan(t *testing.T) {
	for _, tc := range []struct {
		name     string
		do       func(t *testing.T, path string)
		observe  bool // the drain measured a preserve
		level    int
		est      time.Duration // the level's estimate kept
		estimate time.Duration // the file's estimate
	}{
		{"removed", func(t *testing.T, path string) { require.NoError(t, os.Remove(path)) }, true, 0, 0, 2 * time.Second},
		{"removed, nothing measured", func(t *testing.T, path string) { require.NoError(t, os.Remove(path)) }, false, 0, 0, 3 * time.Second},
		{"level edited", func(t *testing.T, path string) {
			r, err := learned.Read(path)
			require.NoError(t, err)
			r.LearnedLimit, r.LearnedEstimate = 4, 5*time.Second
			require.NoError(t, r.Write(path))
		}, true, 4, 5 * time.Second, 2 * time.Second},
		{"broken by an edit", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, []byte(`{"written": "2026-12-05T00:00:00Z", "estimate_ns": -1}`+"\n"), 0o644))
		}, true, 0, 0, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, learned.File)
			before := learned.Rates{Written: time.Now().Add(-time.Hour), Estimate: 8 * time.Second, Observations: 20, Limit: 8,
				LearnedLimit: 16, LearnedEstimate: 8 * time.Second, MaxLimit: 32}
			require.NoError(t, before.Write(path))
			var logs bytes.Buffer
			st := learned.Server{Dir: dir, Concurrency: 8, Prior: 3 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}.Start()
			cfg := st.Config()
			require.Equal(t, 8*time.Second, cfg.Estimator.Estimate(), "started from the file")
			if tc.observe {
				cfg.Estimator.Observe(2 * time.Second)
			}

			tc.do(t, path)
			budget, err := deadline.New(30*time.Second, deadline.Config{})
			require.NoError(t, err)
			st.Save(&drain.Report{Preserve: &pause.Report{Limit: 8}}, budget, nil) // a fixed limit: no level learned
			got, err := learned.Read(path)
			require.NoError(t, err, "Save wrote the file:\n%s", logs.String())
			level, est := got.Level()
			assert.Equal(t, tc.level, level, "the level:\n%s", logs.String())
			assert.Equal(t, tc.est, est, "its estimate")
			assert.Equal(t, tc.estimate, got.Estimate, "the estimate of one preserve")
			assert.Contains(t, logs.String(), "file="+path)
		})
	}
}

// The lock file removed by hand while its server holds it (a clean-up of
// "stale" lock files; a glob that meant the rates file): the kernel's lock
// stays on the removed file, and the next server creates another and
// takes it, beside the first. Nothing keeps two servers apart then, so
// the first says so at its Save: the file it holds is gone from the state
// directory, or another server's now, naming it. The two servers' saves
// still keep the freshest level: the first's drain learned 16 and saves
// it (the file is its drain's to write), and the second's drain, which
// learned none, keeps it. The first used to save in silence.
func TestALockFileRemovedByHandIsSaid(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, learned.File)
	before := learned.Rates{Written: time.Now().Add(-time.Hour), Estimate: time.Second, Limit: 8, LearnedLimit: 4, LearnedEstimate: time.Second, MaxLimit: 32}
	require.NoError(t, before.Write(path))
	budget, err := deadline.New(30*time.Second, deadline.Config{})
	require.NoError(t, err)
	var oldLogs, newLogs bytes.Buffer
	old := learned.Server{Dir: dir, Logger: slog.New(slog.NewTextHandler(&oldLogs, nil))}.Start()
	old.Config().Estimator.Observe(2 * time.Second)

	require.NoError(t, os.Remove(filepath.Join(dir, learned.LockFile)))
	neu := learned.Server{Dir: dir, Concurrency: 8, Logger: slog.New(slog.NewTextHandler(&newLogs, nil))}.Start()
	defer neu.Close()
	require.NotContains(t, newLogs.String(), "another server holds", "the removed file let the second server in")

	old.Save(&drain.Report{Preserve: &pause.Report{Limit: 16, LearnedLimit: 16}}, budget, nil)
	assert.Contains(t, oldLogs.String(), "the lock file this server held was removed", oldLogs.String())
	assert.Contains(t, oldLogs.String(), "lock="+filepath.Join(dir, learned.LockFile))
	assert.Regexp(t, `now="pid \d+`, oldLogs.String(), "it names the server holding the new one")
	got, err := learned.Read(path)
	require.NoError(t, err)
	assert.Equal(t, 16, got.LearnedLimit, "what the first drain learned is saved")

	neu.Config()
	neu.Save(&drain.Report{Preserve: &pause.Report{Limit: 8}}, budget, nil)
	got, err = learned.Read(path)
	require.NoError(t, err)
	assert.Equal(t, 16, got.LearnedLimit, "the second drain learned none: the first's level stays")
	assert.Equal(t, 8, got.Limit)
	assert.NotContains(t, newLogs.String(), "the lock file this server held was removed")

	// Removed and not taken again: gone, said so too.
	alone := learned.Server{Dir: dir, Logger: slog.New(slog.NewTextHandler(&oldLogs, nil))}.Start()
	require.NoError(t, os.Remove(filepath.Join(dir, learned.LockFile)))
	oldLogs.Reset()
	alone.Config()
	alone.Save(nil, budget, nil)
	assert.Contains(t, oldLogs.String(), "the lock file this server held was removed", oldLogs.String())
	assert.Contains(t, oldLogs.String(), `now="no lock file"`)
}
