// Package fakeagentenv is a test double of AgentENV's node API, faithful to
// what a supervisor in front of the real server sees
// (src/api/spec/paths/sandboxes.yml, shared/research/agentenv-and-ateom.md):
//
//   - GET /v2/sandboxes?state=running&limit=N&nextToken=T answers a page of
//     ListedSandbox objects keyed by sandboxID, with memoryMB; the next
//     page's token comes in the x-next-token header, absent on the last
//     page. GET /sandboxes (deprecated) lists the running ones in one page;
//     Config.NoV2 makes v2 answer 404, as an older server would.
//   - POST /sandboxes/{sandboxID}/pause: 204 once paused and its record is
//     durable; 409 while the sandbox is not running (a pause already in
//     progress, paused, resuming); 404 unknown; 500 for an injected
//     failure, recoverable (the sandbox stays running) or terminal (the
//     sandbox is removed, and answers 404 from then on). Pause time grows
//     with memoryMB.
//   - Every API request without the right X-API-Key gets 401.
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
// Where the real server's behaviour is not known, the double chooses and
// says so: a sandbox in a transitional state (pausing, resuming) is listed
// only without a state filter, under its transitional state. This package
// is internal test scaffolding, not a stable API.
package fakeagentenv
