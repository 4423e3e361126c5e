package pause_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/mixbench"
	"github.com/drainkit/drainkit/pause"
)

// benchScale divides the snapshot sizes of the disk and CPU mixes
// (lognormal 16-256 MiB): DRAINKIT_BENCH_SCALE, 4 when unset, so that a
// Run moves about 1 GiB on a small VM.
func benchScale(b *testing.B) int64 {
	s := os.Getenv("DRAINKIT_BENCH_SCALE")
	if s == "" {
		return 4
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		b.Fatalf("DRAINKIT_BENCH_SCALE=%q: want a positive integer", s)
	}
	return n
}

// snapshotSizes returns n sizes, lognormal around 64 MiB (sigma 0.7),
// clamped to 16-256 MiB and divided by scale; the same for every Run.
func snapshotSizes(n int, scale int64) []int64 {
	rng := rand.New(rand.NewPCG(16, 256))
	sizes := make([]int64, n)
	for i := range sizes {
		mb := min(max(64*math.Exp(0.7*rng.NormFloat64()), 16), 256)
		sizes[i] = int64(mb*mib) / scale
	}
	return sizes
}

// A snapshot sandbox preserves by writing a snapshot of its size the way a
// server persists a paused sandbox: a temporary file, fsync, an atomic
// rename, fsync of the directory.
type snapshot struct {
	id   string
	dir  string
	size int64
	data []byte // shared random bytes, written over and over
}

func (s *snapshot) ID() string  { return s.id }
func (s *snapshot) Size() int64 { return s.size }
func (s *snapshot) Preserve(ctx context.Context) error {
	tmp := filepath.Join(s.dir, s.id+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	for left := s.size; left > 0; {
		if err := ctx.Err(); err != nil {
			f.Close()
			return err
		}
		n := min(left, int64(len(s.data)))
		if _, err := f.Write(s.data[:n]); err != nil {
			f.Close()
			return err
		}
		left -= n
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, s.id)); err != nil {
		return err
	}
	d, err := os.Open(s.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// BenchmarkPreserveDisk: 48 sandboxes whose preserve writes a snapshot of
// its size to this machine's disk (lognormal 16-256 MiB divided by
// DRAINKIT_BENCH_SCALE; fsync and atomic rename), preserved by the
// adaptive default and by fixed limits 1..32, side by side in one run.
// x-best-fixed-disk is the adaptive time over the best fixed limit's;
// x-physical-disk is the adaptive time over the bytes divided by the
// bandwidth measured at that best fixed limit.
//
//	go test -run '^$' -bench PreserveDisk -benchtime 2x ./pause
func BenchmarkPreserveDisk(b *testing.B) {
	const n = 48
	sizes := snapshotSizes(n, benchScale(b))
	dir := b.TempDir()
	data := make([]byte, mib)
	for i := range data {
		data[i] = byte(rand.Uint32())
	}
	mk := func() ([]pause.Sandbox, error) {
		sbs := make([]pause.Sandbox, n)
		for i, s := range sizes {
			sbs[i] = &snapshot{id: fmt.Sprint("sb-", i), dir: dir, size: s, data: data}
		}
		return sbs, nil
	}
	// Every Run starts with nothing dirty in the page cache: on ext4
	// (data=ordered) the first fsync of a Run commits the journal with
	// every file's dirty data, so the Run after a build, or after the
	// previous Run's deletes, would pay for them.
	reset := func() error {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		syscall.Sync()
		return os.MkdirAll(dir, 0o700)
	}
	compare(b, "disk", mk, reset)
}

// compare runs a mix through mixbench.Compare once per b.Loop round and
// reports the sums. Every Preserver gets an Estimator with a prior of one
// second, as drain gives it one; the learned Run after the adaptive one
// (x-best-fixed-MIX-learned) gets what a server keeps of that Run: its
// learned limit and an Estimator from its estimate (mixbench.FromLearned).
//
// An untimed warm-up Run at the sweep's highest limit comes first: the
// first Run in a process pays for what the ones after it find ready (the
// loopback connections of the wait mix, blocks the disk mix writes for the
// first time: 6.5 s against 0.9-3.7 s for the same Run on this VM), and
// without it the Run that comes first in round 0 would pay for it.
func compare(b *testing.B, mix string, mk func() ([]pause.Sandbox, error), reset func() error) {
	if err := reset(); err != nil {
		b.Fatal(err)
	}
	sbs, err := mk()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := mixbench.Run(context.Background(), sbs, pause.Config{Limit: slices.Max(mixbench.Sweep)}); err != nil {
		b.Fatal(err)
	}
	var sum mixbench.Comparison
	for b.Loop() { // one round: the adaptive default, then every fixed limit
		c, err := mixbench.Compare(context.Background(), 1, sum.Rounds, mk, reset, mixbench.Sweep,
			pause.Config{Estimator: deadline.NewEstimator(time.Second)})
		if err != nil {
			b.Fatal(err)
		}
		sum.Add(c)
	}
	sum.Report(b, mix)
	n := time.Duration(sum.Rounds)
	b.Logf("%s: adaptive %v (final limit %d, learned %d), from what it learned %v (final limit %d), best fixed %d: %v, physical %v", mix,
		sum.Adaptive.Took/n, sum.Adaptive.FinalLimit, sum.Adaptive.Learned, sum.Learned.Took/n, sum.Learned.FinalLimit,
		sum.Best().Limit, sum.Best().Took/n, sum.Physical())
}

// waiter preserves by waiting on a remote store: one request to a loopback
// HTTP server that answers after its latency.
type waiter struct {
	id     string
	url    string
	client *http.Client
}

func (w *waiter) ID() string { return w.id }
func (w *waiter) Preserve(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, w.url+"/"+w.id, nil)
	if err != nil {
		return err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("store answered %s", resp.Status)
	}
	return nil
}

// BenchmarkPreserveWait: 256 sandboxes whose preserve waits 20 ms on a
// loopback HTTP server (a remote store): no knee below the ceiling.
//
//	go test -run '^$' -bench PreserveWait -benchtime 2x ./pause
func BenchmarkPreserveWait(b *testing.B) {
	const n, latency = 256, 20 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(latency):
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	mk := func() ([]pause.Sandbox, error) {
		sbs := make([]pause.Sandbox, n)
		for i := range sbs {
			sbs[i] = &waiter{id: fmt.Sprint("sb-", i), url: srv.URL, client: client}
		}
		return sbs, nil
	}
	compare(b, "wait", mk, func() error { return nil })
}

// hasher preserves by burning CPU: SHA-256 over its size, the CPU part of
// a checkpoint (compressing or checksumming memory) without runsc.
type hasher struct {
	id   string
	size int64
	data []byte
}

func (h *hasher) ID() string  { return h.id }
func (h *hasher) Size() int64 { return h.size }
func (h *hasher) Preserve(ctx context.Context) error {
	sum := sha256.New()
	for left := h.size; left > 0; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(left, int64(len(h.data)))
		sum.Write(h.data[:n])
		left -= n
	}
	_ = sum.Sum(nil)
	return nil
}

// BenchmarkPreserveCPUHash: 48 sandboxes whose preserve hashes its size
// (the disk mix's sizes): bound by the machine's cores.
// The real-checkpoint CPU mix is internal/runsc's BenchmarkPreserveRunsc.
//
//	go test -run '^$' -bench PreserveCPUHash -benchtime 2x ./pause
func BenchmarkPreserveCPUHash(b *testing.B) {
	const n = 48
	sizes := snapshotSizes(n, benchScale(b))
	data := make([]byte, 256<<10)
	mk := func() ([]pause.Sandbox, error) {
		sbs := make([]pause.Sandbox, n)
		for i, s := range sizes {
			sbs[i] = &hasher{id: fmt.Sprint("sb-", i), size: s, data: data}
		}
		return sbs, nil
	}
	compare(b, "cpu-hash", mk, func() error { return nil })
}
