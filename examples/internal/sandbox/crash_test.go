//go:build linux

package sandbox

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
)

// removing is a record store whose Delete says "removing ID" on stdout and then blocks:
// the process is in its resume, past the runtime's, before its record is removed, where
// the test SIGKILLs it.
type removing struct{ recordStore }

func (removing) Delete(id string) error {
	fmt.Println("removing", id)
	select {} // until the kill
}

// resumeUntilKilled is a server's node on dir (the fake runtime): it pauses a new
// sandbox (its image and its record durable), says "paused ID", and resumes it until it
// is killed in the resume (removing).
func resumeUntilKilled(dir string) {
	st, err := store.Open(filepath.Join(dir, "records"))
	if err != nil {
		fmt.Println(err)
		os.Exit(3)
	}
	n, _, err := NewNode(&Fake{Dir: filepath.Join(dir, "images"), PauseLatency: time.Millisecond}, st, nil)
	if err != nil {
		fmt.Println(err)
		os.Exit(3)
	}
	ctx := context.Background()
	info, err := n.Create(ctx, 3600)
	if err == nil {
		_, err = n.Pause(ctx, info.ID)
	}
	if err != nil {
		fmt.Println(err)
		os.Exit(3)
	}
	fmt.Println("paused", info.ID)
	n.st = removing{n.st}
	_, err = n.Resume(ctx, info.ID)
	fmt.Println("resume returned:", err)
	os.Exit(3)
}

// Fault: the kubelet's SIGKILL during a resume, after the runtime's and before the record
// is removed, must bring the sandbox back paused, as before a resume no one was told of
// (Node.Resume's doc): its record is there, and the next server lists it paused. The fake
// runtime removed the image in its Resume, so that sandbox came back paused with no image:
// every resume of it failed ("no such file or directory"), and it stayed listed paused,
// which has no timeout, until a delete. The fake's Resume now leaves the image, which the
// Node removes (DropImage) once the record is gone. A real server process, SIGKILLed there.
func TestKillDuringResumeLeavesTheSandboxResumable(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=resume-killed:"+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p := pid1test.Start(t, cmd)
	lines := bufio.NewReader(out)
	line, err := lines.ReadString('\n')
	require.NoError(t, err)
	id, ok := strings.CutPrefix(strings.TrimSpace(line), "paused ")
	require.True(t, ok, "%q", line)
	line, err = lines.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "removing "+id+"\n", line, "the child is in its resume, its record not removed yet")
	require.NoError(t, cmd.Process.Kill()) // SIGKILL
	_ = p.Wait(t, 30*time.Second, "the child SIGKILLed did not exit")

	n, problems := newFakeNode(t, dir, time.Millisecond)
	assert.Empty(t, problems)
	require.Equal(t, []Info{{ID: id, State: Paused, TimeoutS: 3600}}, n.List(), "back paused: its record")
	r, err := n.Resume(t.Context(), id)
	require.NoError(t, err, "the sandbox the record brings back resumes from its image")
	assert.Equal(t, Running, r.State)
	recs, _, err := n.st.Load()
	require.NoError(t, err)
	assert.Empty(t, recs, "its record removed by this resume")
	assert.NoFileExists(t, filepath.Join(dir, "images", id+".img"), "and then its image, which nothing names")
}
