// Package naiveserver is a deliberately naive sandbox server, written
// without drainkit, for the supervisor's end-to-end test: it has the
// shutdown bugs drainkit exists to fix, so the test can show them and show
// the supervisor fixing them from outside.
//
// Its HTTP API is AgentENV's shape:
//
//	GET  /sandboxes               [{"id":"sb-1","state":"running"}, ...]
//	POST /sandboxes               creates a running sandbox, 201 {"id":...}
//	POST /sandboxes/{id}/pause    pauses it and persists its record, 204
//	POST /sandboxes/{id}/resume   resumes a paused one, 204
//	GET  /prestop                 its own preStop hook
//
// The bugs, on purpose:
//   - GET /prestop waits until no sandbox is running, with no deadline:
//     sandboxes that never end hold it until the kubelet gives up, and the
//     time is gone for the SIGTERM work;
//   - on SIGTERM it pauses the running sandboxes one at a time, then stops
//     its device daemon child (if -daemon was given): SIGKILL lands in the
//     middle, the sandboxes not reached are lost and the daemon is killed.
//
// What it gets right: a pause (which may run concurrently with others)
// takes -pause, then writes the sandbox's record to -state; at start every
// record is loaded back as a paused sandbox. Only paused sandboxes survive
// the process, as in AgentENV.
package naiveserver
