package statedir

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/durable"
	"github.com/drainkit/drainkit/internal/logbuf"
)

// holdEnv makes the test binary a holder: it takes the lock of the directory the variable
// names, prints "held", and waits to be killed.
const holdEnv = "STATEDIR_TEST_HOLD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(holdEnv); dir != "" {
		if _, err := Acquire(context.Background(), dir, Config{Owner: "holder"}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("held")
		time.Sleep(time.Hour) // until the test kills it: not a timing assertion
		os.Exit(1)
	}
	goleak.VerifyTestMain(m)
}

// noTime drops the time from log lines, so that they compare.
func noTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// holderIn reads the holder the lock file of dir names.
func holderIn(t *testing.T, dir string) Holder {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, LockFile))
	require.NoError(t, err)
	var h Holder
	require.NoError(t, json.Unmarshal(data, &h), "%s", data)
	return h
}

// The timeline of a rolling update, in virtual time: the old server holds the directory
// (it is draining); the new one waits, says at once and every LogEvery that it waits and
// for whom, never takes the lock while the old one holds it, and takes it within Poll of
// the old one's release, naming itself in the lock file.
//
//	0s   old holds          new: "held by another server", pid and owner of old
//	10s                     new: "still waiting"
//	20s                     new: "still waiting"
//	25s  old releases
//	25.1s                   new takes the lock: "state directory taken"
func TestWaiterSaysForWhomItWaitsAndTakesTheLockOnceReleased(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state") // made by Acquire
	old, err := Acquire(context.Background(), dir, Config{Owner: "sandboxd-old"})
	require.NoError(t, err)
	defer old.Release()
	assert.Equal(t, Holder{PID: os.Getpid(), Owner: "sandboxd-old", Since: holderIn(t, dir).Since}, holderIn(t, dir))
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())

	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{ReplaceAttr: noTime}))
		taken := make(chan *Lock, 1)
		go func() {
			l, err := Acquire(context.Background(), dir, Config{Owner: "sandboxd-new", Logger: logger})
			assert.NoError(t, err)
			taken <- l
		}()
		time.Sleep(25 * time.Second)
		synctest.Wait()
		select {
		case <-taken:
			t.Fatal("the new server took the lock the old one holds")
		default:
		}
		who := fmt.Sprintf("pid %d (sandboxd-old) since", os.Getpid())
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		require.Len(t, lines, 3, "at once, at 10 s and at 20 s: %s", &logs)
		assert.Contains(t, lines[0], `level=WARN msg="state directory held by another server; waiting for it to exit before touching it" dir=`+dir)
		assert.Contains(t, lines[1], `msg="still waiting for the state directory"`)
		assert.Contains(t, lines[1], "waited=10s")
		assert.Contains(t, lines[2], "waited=20s")
		for _, l := range lines {
			assert.Contains(t, l, who)
		}
		assert.Equal(t, "sandboxd-old", holderIn(t, dir).Owner, "the waiter wrote nothing")

		require.NoError(t, old.Release())
		time.Sleep(DefaultPoll)
		synctest.Wait()
		var l *Lock
		select {
		case l = <-taken:
		default:
			t.Fatalf("the new server did not take the lock within %v of its release: %s", DefaultPoll, &logs)
		}
		defer l.Release()
		assert.Contains(t, logs.String(), `level=INFO msg="state directory taken" dir=`+dir+" waited=25.1s")
		h := holderIn(t, dir)
		assert.Equal(t, "sandboxd-new", h.Owner)
		assert.Equal(t, os.Getpid(), h.PID)
		assert.Equal(t, time.Now(), h.Since.Local().Round(0), "since it took the lock")
	})
}

// A waiter whose context a signal ended (internal/startsig's Context) says so: the
// context's cause, not "context canceled".
func TestWaiterSaysWhyItsContextEnded(t *testing.T) {
	dir := t.TempDir()
	old, err := Acquire(context.Background(), dir, Config{Owner: "sandboxd-old"})
	require.NoError(t, err)
	defer old.Release()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(3*time.Second, func() { cancel(errors.New("SIGTERM received")) })
		_, err := Acquire(ctx, dir, Config{Owner: "sandboxd-new"})
		assert.ErrorIs(t, err, context.Cause(ctx))
		assert.Regexp(t, `^state directory .*: gave up waiting after 3s for pid \d+ \(sandboxd-old\) since \S+, which holds it: SIGTERM received$`, err.Error())
	})
}

// A waiter whose context ends gives up with an error naming the directory, the holder,
// how long it waited and why, and leaves the lock file as the holder wrote it.
func TestWaiterGivesUpWhenItsContextEnds(t *testing.T) {
	dir := t.TempDir()
	old, err := Acquire(context.Background(), dir, Config{Owner: "sandboxd-old"})
	require.NoError(t, err)
	defer old.Release()
	before, err := os.ReadFile(filepath.Join(dir, LockFile))
	require.NoError(t, err)

	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l, err := Acquire(ctx, dir, Config{Owner: "sandboxd-new"})
		require.Error(t, err)
		assert.Nil(t, l)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "state directory "+dir+": gave up waiting after 5s for pid "+
			fmt.Sprint(os.Getpid())+" (sandboxd-old) since ")
	})
	after, err := os.ReadFile(filepath.Join(dir, LockFile))
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after), "the waiter touched nothing")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "the lock file alone")
}

// The kernel releases the lock of a holder that is SIGKILLed: its successor takes the
// lock at once, with no wait, though the lock file still names the dead holder.
func TestKilledHolderNeverBlocksItsSuccessor(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "held\n", line)
	assert.Equal(t, Holder{PID: cmd.Process.Pid, Owner: "holder", Since: holderIn(t, dir).Since}, holderIn(t, dir))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Acquire(ctx, dir, Config{})
	require.ErrorContains(t, err, fmt.Sprintf("pid %d (holder)", cmd.Process.Pid), "held by the live holder")

	require.NoError(t, cmd.Process.Kill())
	<-exited
	exited <- nil // for the cleanup
	var logs logbuf.Buffer
	l, err := Acquire(ctx, dir, Config{Owner: "successor", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err, "taken at once: its ctx has ended already")
	defer l.Release()
	assert.Empty(t, logs.String(), "no wait")
	assert.Equal(t, "successor", holderIn(t, dir).Owner)
}

// Release releases the lock (the next Acquire takes it at once) and is idempotent.
func TestReleaseLetsTheNextServerIn(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(context.Background(), dir, Config{})
	require.NoError(t, err)
	assert.Equal(t, dir, l.Dir())
	require.NoError(t, l.Release())
	require.NoError(t, l.Release(), "idempotent")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	next, err := Acquire(ctx, dir, Config{})
	require.NoError(t, err)
	require.NoError(t, next.Release())
}

// A state directory that cannot be made fails naming it.
func TestUnusableDirectoryIsNamed(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err := Acquire(context.Background(), filepath.Join(file, "state"), Config{})
	require.ErrorContains(t, err, "state directory")
	require.ErrorContains(t, err, file)
}

// TryAcquire does not wait: while another holds the lock it returns a *HeldError naming
// the lock file and the holder; each Config.File is a lock of its own; it makes no
// directory.
func TestTryAcquireNamesTheHolderWithoutWaiting(t *testing.T) {
	dir := t.TempDir()
	old, err := TryAcquire(dir, Config{File: "rates.lock", Owner: "old"})
	require.NoError(t, err)
	_, err = TryAcquire(dir, Config{File: "rates.lock"})
	held, ok := errors.AsType[*HeldError](err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, filepath.Join(dir, "rates.lock"), held.Path)
	assert.Equal(t, "old", held.Holder.Owner)
	other, err := TryAcquire(dir, Config{})
	require.NoError(t, err, "LockFile is another lock")
	require.NoError(t, other.Release())
	require.NoError(t, old.Release())
	next, err := TryAcquire(dir, Config{File: "rates.lock"})
	require.NoError(t, err)
	require.NoError(t, next.Release())
	_, err = TryAcquire(filepath.Join(dir, "none"), Config{})
	assert.ErrorIs(t, err, fs.ErrNotExist, "no directory made")
}

// ReadHolder reads back the holder a lock wrote; its error is the file's read alone (no
// lock file: internal/learned's "lock moved"), and a file that says nothing yet, or
// nothing it parses, is the zero Holder with no error (a holder that has not written).
func TestReadHolderFailsOnlyWhenTheFileCannotBeRead(t *testing.T) {
	dir := t.TempDir()
	lock, err := TryAcquire(dir, Config{File: "rates.lock", Owner: "this"})
	require.NoError(t, err)
	defer lock.Release()
	h, err := ReadHolder(filepath.Join(dir, "rates.lock"))
	require.NoError(t, err)
	assert.Equal(t, "this", h.Owner)
	assert.Equal(t, os.Getpid(), h.PID)

	for _, data := range []string{"", "not json\n"} {
		path := filepath.Join(dir, "other.lock")
		require.NoError(t, os.WriteFile(path, []byte(data), 0o600))
		h, err := ReadHolder(path)
		require.NoError(t, err, "%q", data)
		assert.Equal(t, Holder{}, h, "%q", data)
	}
	_, err = ReadHolder(filepath.Join(dir, "none.lock"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

// Lock.RemoveTemps removes, in the locked directory, the temporary files that writes of
// one file cut short left (durable.WriteFile's names), and says which; another file's,
// and the file itself, stay. A nil logger logs nowhere.
func TestLockRemovesWhatCutWritesOfAFileLeft(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(context.Background(), dir, Config{})
	require.NoError(t, err)
	defer l.Release()
	write := func(name string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("x"), 0o600))
		return p
	}
	cut, other, file := write(".report.json.abc1"+durable.TempSuffix), write(".other.json.abc1"+durable.TempSuffix), write("report.json")
	var logs logbuf.Buffer
	l.RemoveTemps("report.json", slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{ReplaceAttr: noTime})))
	assert.NoFileExists(t, cut)
	assert.FileExists(t, other)
	assert.FileExists(t, file)
	assert.Contains(t, logs.String(), `level=INFO msg="removed what a write cut short left (a crash, a SIGKILL between its create and its rename)" file=`+file+" removed=["+cut+"]")

	cut = write(".report.json.abc2" + durable.TempSuffix)
	l.RemoveTemps("report.json", nil)
	assert.NoFileExists(t, cut)

	cut = write(".report.json.abc3" + durable.TempSuffix)
	require.NoError(t, l.Release())
	l.RemoveTemps("report.json", nil)
	assert.FileExists(t, cut, "released, the lock holds nothing: another server's write may be in flight")
	(*Lock)(nil).RemoveTemps("report.json", nil)
}
