package fakeapiserver_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/kube"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A kube.Pod made from the returned Config reads the pod from the handler,
// over TLS on loopback, with the token it was given.
func TestConfigReachesTheHandlerWithTheToken(t *testing.T) {
	requests := make(chan string, 10)
	srv, cfg := fakeapiserver.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests <- r.Method + " " + r.URL.Path + " " + r.Header.Get("Authorization")
		fmt.Fprint(w, `{"metadata":{"name":"sandboxd-0","namespace":"agentenv","deletionTimestamp":"2026-11-30T03:30:00Z"}}`)
	}), "agentenv", "token-1")
	assert.Regexp(t, `^https://127\.0\.0\.1:\d+$`, srv.URL)
	assert.Equal(t, srv.URL, cfg.Host)
	assert.Equal(t, "agentenv", cfg.Namespace)

	pod, err := kube.New("sandboxd-0", cfg)
	require.NoError(t, err)
	d, err := pod.Deletion(t.Context())
	require.NoError(t, err)
	assert.Equal(t, time.Date(2026, 11, 30, 3, 30, 0, 0, time.UTC), d.Timestamp.UTC())
	require.Len(t, requests, 1)
	assert.Equal(t, "GET /api/v1/namespaces/agentenv/pods/sandboxd-0 Bearer token-1", <-requests)
}

// A Pod answers a kube.Pod's reads with its deletionTimestamp and grace,
// the first ReadsAnswered of them, keeps the Events posted, and once told
// to refuse, refuses everything.
func TestPodAnswersReadsAndKeepsEvents(t *testing.T) {
	api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0", ReadsAnswered: 2}
	_, cfg := fakeapiserver.Start(t, api, "agentenv", "t")
	cfg.UID = "uid-0" // no read for the Events
	pod, err := kube.New("sandboxd-0", cfg)
	require.NoError(t, err)
	kill := time.Date(2026, 11, 30, 3, 30, 0, 0, time.UTC)
	api.SetDeletion(kill)
	api.SetGrace(45)
	d, err := pod.Deletion(t.Context())
	require.NoError(t, err)
	assert.Equal(t, kill, d.Timestamp.UTC())
	g, err := pod.Grace(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 45*time.Second, g)
	_, err = pod.Deletion(t.Context())
	assert.ErrorContains(t, err, "503", "past ReadsAnswered")
	assert.Equal(t, 3, api.Reads())

	pod.Record(kube.Event{Reason: "DrainStarted"})
	assert.Equal(t, kube.EventStats{Posted: 1}, pod.Flush(t.Context()))
	assert.Equal(t, []string{"DrainStarted"}, api.Reasons())
	api.Refuse(http.StatusForbidden)
	pod.Record(kube.Event{Reason: "DrainFinished"})
	assert.Contains(t, pod.Flush(t.Context()).LastError, "403")
	assert.Len(t, api.Events(), 1)
}

// Delete moves the deletion as the API server does: a second, shorter
// deletion keeps the first one's time and takes the new grace; one whose
// grace has already run out since then is now, with 1 s; a longer one is
// ignored. (internal/realapiserver checks the real one does this.)
func TestDeleteShortensAsTheAPIServerDoes(t *testing.T) {
	api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv"}
	_, cfg := fakeapiserver.Start(t, api, "agentenv", "t")
	pod, err := kube.New("sandboxd-0", cfg)
	require.NoError(t, err)
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	read := func() (time.Duration, time.Duration) {
		d, err := pod.Deletion(t.Context())
		require.NoError(t, err)
		return d.Timestamp.Sub(t0), d.Grace
	}
	steps := []struct {
		at, grace  time.Duration // from t0
		ts, period time.Duration
	}{
		{0, time.Hour, time.Hour, time.Hour},
		{10 * time.Minute, 15 * time.Minute, 15 * time.Minute, 15 * time.Minute}, // the first deletion's time + 15 min
		{11 * time.Minute, 20 * time.Minute, 15 * time.Minute, 15 * time.Minute}, // longer: ignored
		{20 * time.Minute, 5 * time.Minute, 20 * time.Minute, time.Second},       // run out: now, 1 s
	}
	for _, s := range steps {
		api.Delete(t0.Add(s.at), s.grace)
		ts, period := read()
		assert.Equal(t, s.ts, ts, "deletionTimestamp after the delete at t0+%v with %v", s.at, s.grace)
		assert.Equal(t, s.period, period, "deletionGracePeriodSeconds after the delete at t0+%v with %v", s.at, s.grace)
	}
}
