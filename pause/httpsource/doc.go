// Package httpsource lists and preserves the sandboxes of a sandbox server
// through the HTTP API the server already has. A server that cannot import
// drainkit (AgentENV is written in Rust) still gets the bounded parallel
// Preserver, the deadline budget and the Report: a supervisor beside it lists
// the running sandboxes with GET and pauses each one with a request.
//
// Typical wiring, in a supervisor process in front of the server:
//
//	cfg := httpsource.AgentENV() // AgentENV's node API
//	cfg.APIKey = os.Getenv("DRAINKIT_API_KEY") // or APIKeyFile: read again when a rotated Secret changes it
//	src, err := httpsource.New("http://127.0.0.1:8000", cfg)
//	p, err := pause.New(src, pause.Config{Limit: 16})
//	...
//	ctx, cancel := plan.Context(ctx, "preserve")
//	report := p.Run(ctx, budget.Deadline())
//
// The defaults are a generic shape: GET /sandboxes answers a JSON array of
// {"id": ..., "state": ...} objects, the ones in state "running" need
// preserving, and POST /sandboxes/{id}/pause pauses one. Paths, method, JSON
// fields, running states, pagination (a next-page token in a response
// header), a fallback list path, a size field and the API-key header are
// fields of Config. AgentENV returns the Config for AgentENV's real node API: GET
// /v2/sandboxes across x-next-token pages, the running ones (the deprecated GET
// /sandboxes when v2 answers 404), sandboxes keyed by sandboxID and sized by
// memoryMB, POST /sandboxes/{sandboxID}/pause. A page after the first that
// fails fails the listing, and List returns the sandboxes of the pages
// before it with the error, which a Preserver preserves (see
// pause.Lister).
//
// Sizes: with a size field, the listed sandboxes are pause.Sized, so the
// Preserver orders them by size and estimates their pauses from it until
// it has measured some (see pause.Sized).
//
// Guarantees: every request returns by its context's deadline, and by the
// per-request timeout when one is set; over HTTP/2, a connection gone dead
// silently fails its requests within 5 s, and over HTTP/1 no pause is
// sent on a connection kept open from an earlier request, which the
// server's keep-alive timeout may be closing as it arrives (see
// Config.Client). An overloaded server (429, or 503
// with Retry-After) answering while other pauses were on the wire gets the
// request again in the next free slot, no more at once than it handled;
// answering the only one, its Retry-After is waited when it ends before
// that deadline, and the sandbox is not asked again before that time
// (see Source), and when it ends past it the Preserver ends the sandbox
// Failed at once (see pause.Sandbox); a listing so answered is made again
// by the Preserver at the time it names, never past the phase deadline
// (see pause.Lister).
// Errors come classified for the Preserver (gone,
// permanent, transient; see Source): a refusal of the key (401, 403) is
// permanent with Config.APIKey and transient with Config.APIKeyFile,
// whose rotated key reaches the file a minute or more after the server
// has it, so a drain in that window preserves its sandboxes once it
// arrives, within 100 ms of it and in the phase's time (see
// Config.APIKeyFile). A 202 Accepted
// to a pause counts only once the listing no longer shows the sandbox
// running. Against a server that pauses one
// sandbox at a time, the Source's concurrency never exceeds what the server
// showed it handles, so a high Preserver limit costs no throughput there.
package httpsource
