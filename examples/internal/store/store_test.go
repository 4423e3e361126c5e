package store

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// writerEnv makes the test binary a process that Puts records until it is killed.
const writerEnv = "DRAINKIT_STORE_WRITER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(writerEnv); dir != "" {
		writeForever(dir)
	}
	goleak.VerifyTestMain(m)
}

func writeForever(dir string) {
	st, err := Open(dir)
	if err != nil {
		os.Exit(1)
	}
	pad := strings.Repeat("x", 64<<10) // big records make a kill mid-write likely
	for i := 0; ; i++ {
		id := fmt.Sprint("sb-", i%50)
		if err := st.Put(Record{ID: id, State: "paused", Runtime: "fake", Image: pad, TimeoutS: i}); err != nil {
			os.Exit(1)
		}
	}
}

func rec(id string) Record {
	return Record{ID: id, State: "paused", Runtime: "fake", Image: "/img/" + id, TimeoutS: 60,
		PausedAt: time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)}
}

func TestPutLoadDeleteRoundTrip(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "recs"))
	require.NoError(t, err)
	require.NoError(t, st.Put(rec("b")))
	require.NoError(t, st.Put(rec("a")))
	r := rec("a")
	r.TimeoutS = 99
	require.NoError(t, st.Put(r), "a second Put replaces")

	recs, problems, err := st.Load()
	require.NoError(t, err)
	assert.Empty(t, problems)
	assert.Equal(t, []Record{r, rec("b")}, recs)

	require.NoError(t, st.Delete("a"))
	require.NoError(t, st.Delete("a"), "deleting a missing record is fine")
	recs, _, err = st.Load()
	require.NoError(t, err)
	assert.Equal(t, []Record{rec("b")}, recs)
}

func TestOpenAndPutRejectBadInput(t *testing.T) {
	_, err := Open("")
	require.ErrorContains(t, err, "dir")
	st, err := Open(t.TempDir())
	require.NoError(t, err)
	for _, id := range []string{"", "../x", "a/b", ".hidden"} {
		assert.Error(t, st.Put(Record{ID: id}), "id %q", id)
		assert.Error(t, st.Delete(id), "id %q", id)
	}
}

func TestLoadReportsDamagedRecordsAndNeverLoadsThem(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir)
	require.NoError(t, err)
	require.NoError(t, st.Put(rec("good")))
	good, err := Encode(rec("x"))
	require.NoError(t, err)

	write := func(name string, data []byte) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o600))
	}
	write("truncated.rec", good[:len(good)-5])
	write("headless.rec", good[:10])
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)-3] ^= 0x20
	write("flipped.rec", flipped)
	write("x.rec", good) // a good record, under its own name
	write("renamed.rec", good)
	write("garbage.rec", []byte("drainkit-record/1 3 abc\n{}}"))
	write(".y.123.tmp", good[:20])
	write("notes.txt", []byte("ignored"))

	recs, problems, err := st.Load()
	require.NoError(t, err)
	assert.Equal(t, []Record{rec("good"), rec("x")}, recs)
	byName := map[string]Problem{}
	for _, p := range problems {
		byName[filepath.Base(p.Path)] = p
	}
	require.Len(t, byName, 6, "%+v", problems)
	assert.Contains(t, byName["truncated.rec"].Err, "truncated")
	assert.Contains(t, byName["headless.rec"].Err, "no header")
	assert.Contains(t, byName["flipped.rec"].Err, "checksum")
	assert.Contains(t, byName["renamed.rec"].Err, "does not match")
	assert.Contains(t, byName["garbage.rec"].Err, "checksum")
	assert.True(t, byName[".y.123.tmp"].Incomplete)
	assert.False(t, byName["flipped.rec"].Incomplete)
}

func TestDecodeRejectsUnknownFieldsAndBadIDs(t *testing.T) {
	for name, payload := range map[string]string{
		"unknown field": `{"id":"a","state":"paused","extra":1}`,
		"bad id":        `{"id":"../a"}`,
		"not json":      `[1,2`,
	} {
		data := []byte(fmt.Sprintf("%s %d %s\n%s", magic, len(payload), sha(payload), payload))
		_, err := Decode(data)
		assert.Error(t, err, name)
	}
}

// A real process killed with SIGKILL in the middle of its Puts leaves only good records and
// at most the temporary file of the Put it was in.
func TestKilledWriterLeavesOnlyGoodRecords(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), writerEnv+"="+dir)
	require.NoError(t, cmd.Start())
	require.Eventually(t, func() bool {
		entries, _ := os.ReadDir(dir)
		return len(entries) >= 20
	}, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	st, err := Open(dir)
	require.NoError(t, err)
	recs, problems, err := st.Load()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, len(recs), 19)
	for _, r := range recs {
		assert.Equal(t, "paused", r.State)
		assert.Len(t, r.Image, 64<<10, "a loaded record is whole")
	}
	assert.LessOrEqual(t, len(problems), 1, "at most the Put in progress: %+v", problems)
	for _, p := range problems {
		assert.True(t, p.Incomplete, "%+v", p)
	}
}

func FuzzDecode(f *testing.F) {
	good, _ := Encode(rec("a"))
	f.Add(good)
	f.Add([]byte("drainkit-record/1 2 00\n{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Decode(data)
		if err != nil {
			return
		}
		again, err := Encode(r)
		require.NoError(t, err)
		_, err = Decode(again)
		require.NoError(t, err, "a decoded record encodes to a valid one")
	})
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
