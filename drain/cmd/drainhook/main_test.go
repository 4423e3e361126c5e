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
