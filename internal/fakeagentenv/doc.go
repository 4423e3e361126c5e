// Package fakeagentenv is a test double of AgentENV's node API, faithful to
// what a supervisor in front of the real server sees
// (AgentENV's src/api/spec/paths/sandboxes.yml, src/api/impls/sandbox.rs
// and src/orchestrator/service.rs; shared/research/agentenv-and-ateom.md):
//
//   - GET /v2/sandboxes?state=running&limit=N&nextToken=T answers a page of
//     ListedSandbox objects keyed by sandboxID, with memoryMB, newest
//     first; the next page's token (AgentENV's cursor: padded URL-safe
//     base64) comes in the x-next-token header, absent on the last page.
//     state=running (or paused) filters on the exact internal state; with
//     no state, or both, every sandbox is listed under the state the API
//     shows: paused for pausing, paused and snapshotting, running for the
//     rest. GET /sandboxes (deprecated) lists the running ones in one page;
//     Config.NoV2 makes v2 answer 404, as an older server would. Unlike
//     AgentENV, which pages only when the request has a limit, the double
//     pages at Config.PageSize, to exercise a client's pagination.
//   - POST /sandboxes/{sandboxID}/pause, as AgentENV's pause_sandbox
//     (src/orchestrator/service.rs): 204 once paused and its record is
//     durable, and at once for a sandbox already paused; a request for a
//     sandbox being paused joins that pause and answers its outcome (204,
//     or 409 when it failed and the sandbox runs again); 409 while the
//     sandbox is resuming or snapshotting (Snapshot) or forking (Fork); 404 unknown, or
//     being deleted (BeginDelete: killing, listed as running); 500 for
//     an injected failure, recoverable (the sandbox stays running) or
//     terminal (the sandbox is removed, and answers 404 from then on).
//     Pause time grows with memoryMB. Config.ConflictWhenPaused answers
//     409 for a sandbox paused or being paused instead, as the research
//     note reads the API spec's 409 ("already pausing, paused, resuming").
//   - POST /sandboxes/{sandboxID}/resume resumes a paused sandbox (204; 409
//     when it is not paused; 404 unknown), admitted until Shutdown has
//     begun and 503 from then on, as AgentENV gates resume: a drain that
//     cannot close AgentENV's admissions sees a sandbox it paused running
//     again. Config.ResumeWhenNoneRunning makes users resume some right
//     after the first listing that finds none running (a drain's last).
//   - Every API request without exactly one X-API-Key header holding the
//     key gets 401, with no body (AgentENV's require_auth). SetAPIKey
//     changes the key, as a rotated Secret does, for a client's rotation
//     tests.
//   - Run as a process (Main), the server spawns its ublk daemon as its own
//     child, talks to it over the daemon's Unix socket, and on SIGTERM
//     pauses what is still running one at a time, then asks the daemon to
//     stop over the socket (4-byte big-endian length, then JSON) and waits
//     for its exit, as AgentENV does.
//
// Typical use in a test binary that re-executes itself as the server:
//
//	srv, _ := fakeagentenv.New(fakeagentenv.Config{APIKey: "k", PageSize: 37})
//	for range 200 {
//		srv.Create(1024)
//	}
//	ts := httptest.NewServer(srv.Handler())
//
// This package is internal test scaffolding, not a stable API.
package fakeagentenv
