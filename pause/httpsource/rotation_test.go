package httpsource

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/pause"
)

// rotation is a key rotation caught by a drain, on loopback: the AgentENV
// double checks k1, the supervisor's key file (a Secret volume) holds k1,
// and the Secret is rotated to k2, which the server takes at once and the
// kubelet writes into the volume only later.
type rotation struct {
	srv  *fakeagentenv.Server
	url  string
	vol  *secretVolume
	cfg  Config // AgentENV's, the key from vol
	logs *bytes.Buffer
}

func newRotation(t *testing.T, n int) *rotation {
	srv, url, _ := agentenv(t, n, fakeagentenv.Config{APIKey: "k1", PauseBase: 20 * time.Millisecond})
	vol, cfg := keyVolume(t)
	return &rotation{srv: srv, url: url, vol: vol, cfg: cfg, logs: &bytes.Buffer{}}
}

// source is a Source with the key file, logging to r.logs.
func (r *rotation) source(t *testing.T) *Source {
	cfg := r.cfg
	cfg.Logger = slog.New(slog.NewTextHandler(r.logs, nil))
	s, err := New(r.url, cfg)
	require.NoError(t, err)
	return s
}

// keyVolume returns a Secret volume holding k1 and AgentENV's Config with
// APIKeyFile the volume's key.
func keyVolume(t *testing.T) (*secretVolume, Config) {
	vol := &secretVolume{t: t, dir: t.TempDir()}
	vol.write("k1")
	cfg := AgentENV()
	cfg.APIKeyFile = filepath.Join(vol.dir, "api-key")
	return vol, cfg
}

// double returns the AgentENV double checking k1, with n sandboxes of 1 GiB
// whose pauses take pause, for an in-process transport.
func double(t *testing.T, n int, pause time.Duration) *fakeagentenv.Server {
	srv, err := fakeagentenv.New(fakeagentenv.Config{APIKey: "k1", PauseBase: pause})
	require.NoError(t, err)
	for range n {
		_, err := srv.Create(1024)
		require.NoError(t, err)
	}
	return srv
}

// writeAfter writes the new key into the volume d after it is called, as
// the kubelet does at its next sync; the channel closes then.
func (r *rotation) writeAfter(d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(d)
		r.vol.write("k2")
	}()
	return done
}

// Fault (docs/faults.md row 990): a 401 to a pause was permanent. A key
// rotated in the Secret that APIKeyFile is mounted from reaches the server
// before the file (the kubelet's sync period plus its cache TTL, a minute
// or more): a drain in that window had every pause refused 401 at once,
// every sandbox Failed, though the new key came seconds later, well within
// the preserve phase. With APIKeyFile a refusal (401, 403) is retried while
// the phase lasts, the file read again before each request; the Report's
// errors and the log say what was waited for.
func TestPausesRefusedDuringAKeyRotationWaitForTheNewKey(t *testing.T) {
	const n = 8
	r := newRotation(t, n)
	src := r.source(t)
	var rotated <-chan struct{}
	var listings atomic.Int64
	list := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
		sbs, err := src.List(ctx)
		if listings.Add(1) == 1 { // the server takes the new key: the drain's pauses come after
			r.srv.SetAPIKey("k2")
			rotated = r.writeAfter(300 * time.Millisecond)
		}
		return sbs, err
	})
	p, err := pause.New(list, pause.Config{})
	require.NoError(t, err)
	start := time.Now()
	rep := p.Run(ctxWithDeadline(t, 10*time.Second), time.Time{})
	took := time.Since(start)
	<-rotated

	t.Logf("%v: %v preserved, %d lost", took.Round(time.Millisecond), rep.Counts, rep.Lost())
	assert.Equal(t, n, rep.Counts[pause.Preserved], "every sandbox, once the file has the new key: %v", rep.Err())
	for _, e := range rep.Entries {
		assert.Greater(t, e.Attempts, 1, "%s: refused with the old key first", e.ID)
	}
	for id, st := range r.srv.States() {
		assert.Equal(t, fakeagentenv.Paused, st, id)
	}
	logs := r.logs.String()
	assert.Contains(t, logs, "refused the API key from Config.APIKeyFile")
	assert.Contains(t, logs, "status=401")
	assert.Equal(t, 1, strings.Count(logs, "refused the API key from Config.APIKeyFile"), "once per key:\n%s", logs)
	assert.Equal(t, 1, strings.Count(logs, "the server accepts the API key from Config.APIKeyFile"), "once, the new key:\n%s", logs)
}

// A new key that never comes: the refusals are retried to the phase's end,
// and each sandbox ends Failed in the Report with the refusal and what it
// waited for, in virtual time.
func TestKeyThatNeverArrivesEndsEachSandboxFailedNamingTheFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := double(t, 3, 0)
		_, cfg := keyVolume(t)
		src := inProcess(t, srv.Handler(), cfg)
		sbs, err := src.List(t.Context())
		require.NoError(t, err)
		srv.SetAPIKey("k2")
		p, err := pause.New(once(sbs), pause.Config{})
		require.NoError(t, err)
		start := time.Now()
		rep := p.Run(ctxWithDeadline(t, 30*time.Second), time.Time{})

		// Each waits for the key to the phase's end (row 1105), and no
		// retry starts past it.
		assert.LessOrEqual(t, time.Since(start), 30*time.Second, "no retry starts past the phase")
		assert.Equal(t, 3, rep.Counts[pause.Failed])
		for _, e := range rep.Entries {
			assert.Greater(t, e.Attempts, 3, e.ID)
			assert.Contains(t, e.Error, "401 Unauthorized", e.ID)
			assert.Contains(t, e.Error, "the key from Config.APIKeyFile "+cfg.APIKeyFile+" (unchanged for ", e.ID)
		}
		assert.Error(t, rep.Err())
	})
}

// The same rotation with the listing refused too, as when the server took
// the new key before the drain began: the listing is retried until the
// file has it, where the Run ended at its first listing, no sandbox known.
func TestListingRefusedDuringAKeyRotationWaitsForTheNewKey(t *testing.T) {
	const n = 8
	r := newRotation(t, n)
	src := r.source(t)
	r.srv.SetAPIKey("k2")
	rotated := r.writeAfter(300 * time.Millisecond)
	p, err := pause.New(src, pause.Config{})
	require.NoError(t, err)
	rep := p.Run(ctxWithDeadline(t, 10*time.Second), time.Time{})
	<-rotated

	assert.False(t, rep.Unknown, "a listing succeeded: %s", rep.ListErr)
	assert.Equal(t, n, rep.Counts[pause.Preserved], "%v", rep.Err())
	assert.Contains(t, r.logs.String(), "refused the API key from Config.APIKeyFile")
}

// A static key (Config.APIKey) is not read again: no new key can come
// without a restart, and a refusal stays permanent, the listing's and a
// pause's, each tried once.
func TestStaticKeyRefusalStaysPermanent(t *testing.T) {
	srv, url, counts := agentenv(t, 4, fakeagentenv.Config{APIKey: "k1"})
	src, err := New(url, agentENVWithKey("k1"))
	require.NoError(t, err)
	sbs, err := src.List(t.Context())
	require.NoError(t, err)
	srv.SetAPIKey("k2")

	p, err := pause.New(src, pause.Config{})
	require.NoError(t, err)
	rep := p.Run(ctxWithDeadline(t, 10*time.Second), time.Time{})
	assert.True(t, rep.Unknown)
	assert.Contains(t, rep.ListErr, "401 Unauthorized")
	assert.EqualValues(t, 2, counts.v2.Load(), "the listing before, and one refused")

	p, err = pause.New(once(sbs), pause.Config{})
	require.NoError(t, err)
	rep = p.Run(ctxWithDeadline(t, 10*time.Second), time.Time{})
	assert.Equal(t, 4, rep.Counts[pause.Failed])
	for _, e := range rep.Entries {
		assert.Equal(t, 1, e.Attempts, e.ID)
		assert.Contains(t, e.Error, "401 Unauthorized", e.ID)
	}
}

// A 403 that is one sandbox's own, not the key's: once the server has
// accepted the key for a request sent after its first refusal, a refusal
// of that key is permanent again, and the sandbox Failed at its next
// attempt, not retried until the phase ends holding its slot.
func TestRefusalOfOneSandboxWithAnAcceptedKeyIsPermanent(t *testing.T) {
	const n = 6
	// The others' pauses take 100 ms, so with 2 at once the third is sent
	// after the 403 came back.
	srv, url, _ := agentenv(t, n, fakeagentenv.Config{APIKey: "k1", PauseBase: 100 * time.Millisecond})
	_, cfg := keyVolume(t)
	lister, err := New(url, cfg)
	require.NoError(t, err)
	sbs, err := lister.List(t.Context())
	require.NoError(t, err)
	forbidden := sbs[0].ID()
	h := srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/sandboxes/"+forbidden+"/pause" {
			http.Error(w, `{"message":"not your sandbox"}`, http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer ts.Close()
	src, err := New(ts.URL, cfg)
	require.NoError(t, err)

	p, err := pause.New(src, pause.Config{Limit: 2, Order: pause.OrderFIFO})
	require.NoError(t, err)
	rep := p.Run(ctxWithDeadline(t, 10*time.Second), time.Time{})
	assert.Equal(t, n-1, rep.Counts[pause.Preserved])
	e := entry(t, rep, forbidden)
	assert.Equal(t, pause.Failed, e.Outcome)
	assert.Contains(t, e.Error, "403 Forbidden")
	assert.NotContains(t, e.Error, "retried while time is left", "the last refusal was the sandbox's own")
	assert.Less(t, e.Attempts, 5, "permanent once the key was accepted after its refusal")
}

// The window as a kubelet makes it, in virtual time: the server takes the
// new key at the drain's first listing, the Secret volume gets it 70 s later (a
// 60 s sync period plus the cache), and the preserve phase is 5 min. Every
// sandbox is preserved, the last within 100 ms of the key's arrival (the
// key file is read that often while its refusals wait: row 1102; the
// backoff's wait in progress, up to 15 s, was waited out before) plus
// three rounds of pauses at the limit's start, 8; the server was asked at
// most a request a second per sandbox meanwhile.
func TestKeyRotationWindowOfAKubeletSyncIsWaitedOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, window = 20, 70 * time.Second
		srv := double(t, n, 500*time.Millisecond)
		vol, cfg := keyVolume(t)
		src := inProcess(t, srv.Handler(), cfg)
		start := time.Now()
		listed := false
		list := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			sbs, err := src.List(ctx)
			if !listed { // the server takes the new key: every pause is refused
				listed = true
				srv.SetAPIKey("k2")
				go func() {
					time.Sleep(window)
					vol.write("k2")
				}()
			}
			return sbs, err
		})
		p, err := pause.New(list, pause.Config{})
		require.NoError(t, err)
		rep := p.Run(ctxWithDeadline(t, 5*time.Minute), time.Time{})

		require.Equal(t, n, rep.Counts[pause.Preserved], "%v", rep.Err())
		var last time.Time
		attempts := 0
		for _, e := range rep.Entries {
			if e.End.After(last) {
				last = e.End
			}
			attempts += e.Attempts
		}
		after := last.Sub(start) - window
		t.Logf("key at %v, last preserved %v after it; %d pause requests", window, after, attempts)
		assert.LessOrEqual(t, after, keyPoll+3*500*time.Millisecond)
		assert.LessOrEqual(t, attempts, n*int(window/time.Second), "no flood while refused")
	})
}

// A refusal that was one sandbox's own must not make a later rotation's
// refusals permanent: the key's acceptance after that sandbox's 403 proves
// the key good then, not after the server took a new one. The Source of a
// first Run whose one sandbox was refused 403 (its own) drains again while
// the server is on a new key and the file not yet: every pause waits for
// the key, where each was Failed at once.
func TestRotationAfterOneSandboxsOwnRefusalIsWaitedOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 6
		srv := double(t, n, 100*time.Millisecond)
		vol, cfg := keyVolume(t)
		h := srv.Handler()
		var forbidden atomic.Pointer[string]
		src := inProcess(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if id := forbidden.Load(); id != nil && r.URL.Path == "/sandboxes/"+*id+"/pause" {
				http.Error(w, `{"message":"not your sandbox"}`, http.StatusForbidden)
				return
			}
			h.ServeHTTP(w, r)
		}), cfg)
		sbs, err := src.List(t.Context())
		require.NoError(t, err)
		forbidden.Store(new(sbs[0].ID()))
		p, err := pause.New(once(sbs[:3]), pause.Config{Limit: 2, Order: pause.OrderFIFO})
		require.NoError(t, err)
		rep := p.Run(ctxWithDeadline(t, time.Minute), time.Time{})
		require.Equal(t, pause.Failed, entry(t, rep, sbs[0].ID()).Outcome, "the 403, its own")
		require.Equal(t, 2, rep.Counts[pause.Preserved])

		srv.SetAPIKey("k2")
		written := make(chan struct{})
		go func() {
			defer close(written)
			time.Sleep(20 * time.Second)
			vol.write("k2")
		}()
		p, err = pause.New(once(sbs[3:]), pause.Config{})
		require.NoError(t, err)
		rep = p.Run(ctxWithDeadline(t, time.Minute), time.Time{})
		<-written
		assert.Equal(t, n-3, rep.Counts[pause.Preserved], "%v", rep.Err())
	})
}
