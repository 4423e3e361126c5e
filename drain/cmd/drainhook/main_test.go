package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/drain"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExitsZeroWhenTheDrainWaitIsOver(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(drain.PreStopSummary{Done: true, Reason: "drained"})
	}))
	defer srv.Close()
	var log strings.Builder
	assert.Equal(t, 0, run([]string{"-url", srv.URL}, &log))
	assert.Contains(t, log.String(), "drain wait over")
}

func TestExitsZeroWhenTheServerIsGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there any more
	var log strings.Builder
	assert.Equal(t, 0, run([]string{"-url", "http://" + addr + "/drain", "-failures", "2", "-retry", "1ms"}, &log))
	assert.Contains(t, log.String(), "2 consecutive failures")
	assert.Contains(t, log.String(), "giving up")
}

func TestBadFlagIsAUsageError(t *testing.T) {
	var log strings.Builder
	assert.Equal(t, 2, run([]string{"-nope"}, &log))
}

// Fault (a fresh-eyes review): a manifest's slip was taken silently. The URL
// given without -url was ignored (the hook called the default port, failed
// five times and let the pod go without its drain wait); a negative
// -timeout, -failures or -retry meant the default, and a negative
// -max-wait no bound at all. Each is a usage error now, before any request, naming what
// is wrong.
func TestMisusedFlagsAreUsageErrorsNamingTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"http://127.0.0.1:9/drain"}, `unexpected argument "http://127.0.0.1:9/drain" (the URL goes in -url)`},
		{[]string{"-url", "127.0.0.1:8080/drain"}, `-url "127.0.0.1:8080/drain": want an http:// or https:// URL`},
		{[]string{"-timeout", "-1s"}, "-timeout must not be negative, got -1s"},
		{[]string{"-failures", "-3"}, "-failures must not be negative, got -3"},
		{[]string{"-retry", "-1ms"}, "-retry must not be negative, got -1ms"},
		{[]string{"-max-wait", "-1m"}, "-max-wait must not be negative, got -1m0s"},
	} {
		var log strings.Builder
		assert.Equal(t, 2, run(tc.args, &log), tc.args)
		assert.Contains(t, log.String(), tc.says, tc.args)
	}
}
