// Package httpsource lists and preserves the sandboxes of a sandbox server
// through the HTTP API the server already has. A server that cannot import
// drainkit (AgentENV is written in Rust) still gets the bounded parallel
// Preserver, the deadline budget and the Report: a supervisor beside it lists
// the running sandboxes with GET and pauses each one with a request.
//
// Typical wiring, in a supervisor process in front of the server:
//
//	src, err := httpsource.New("http://127.0.0.1:8080",
//		httpsource.WithAPIKey("", os.Getenv("API_KEY"))) // AgentENV's shape by default
//	p, err := pause.New(src, pause.WithLimit(16))
//	...
//	ctx, cancel := plan.Context(ctx, "preserve")
//	report := p.Run(ctx, budget.Deadline())
//
// The defaults are AgentENV's API: GET /sandboxes answers a JSON array of
// {"id": ..., "state": ...} objects, the ones in state "running" need
// preserving, and POST /sandboxes/{id}/pause pauses one. Paths, method, JSON
// fields, running states and the API-key header are options.
//
// Guarantees: every request returns by its context's deadline, and by the
// per-request timeout when one is set; a Retry-After is waited only when it
// ends before that deadline, and a sandbox is never asked again before its
// Retry-After time. Errors come classified for the Preserver (gone,
// permanent, transient; see Source). Against a server that pauses one
// sandbox at a time, the Source's concurrency never exceeds what the server
// showed it handles, so a high Preserver limit costs no throughput there.
package httpsource
