package httpsource

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/cenkalti/backoff/v4"
	"golang.org/x/net/http/httpguts"

	"github.com/drainkit/drainkit/internal/httpdefault"
	"github.com/drainkit/drainkit/internal/logonce"
	otelx "github.com/drainkit/drainkit/internal/telemetry"
	"github.com/drainkit/drainkit/pause"
)

// scope is the instrumentation scope name: the package import path.
const scope = "github.com/drainkit/drainkit/pause/httpsource"

// The defaults of Config's zero fields: a generic shape (GET /sandboxes
// answers an array of {"id", "state"} objects).
const (
	defaultListPath     = "/sandboxes"
	defaultPausePath    = "/sandboxes/{id}/pause"
	defaultIDField      = "id"
	defaultStateField   = "state"
	defaultRunningState = "running"
	defaultAPIKeyHeader = "X-API-Key"
	// defaultListTimeout bounds one list request. A list is cheap; one that
	// takes longer than this is stuck and the next pass or poll retries it.
	defaultListTimeout = 10 * time.Second
)

// The health check of the Source's own client on an HTTP/2 connection: a
// PING after h2PingAfter with nothing read from it, and the connection
// closed when the PING is not answered within h2PingTimeout. Over HTTP/2
// every request goes on one connection, and one that went dead silently (a
// NAT or load balancer that dropped its state, a path cut with no FIN or
// RST) took every pause sent on it, each waiting to its context's end,
// the phase deadline; a cancelled request does not retire it. Closed, its
// requests fail as having had no answer and the next request dials. The
// server's HTTP/2 layer answers a PING whatever its handlers do, so a slow
// pause keeps its connection; client-go checks the same way (30 s and
// 15 s, for watches that last hours, too long for a drain's seconds).
const (
	h2PingAfter   = 2 * time.Second
	h2PingTimeout = 3 * time.Second
)

// noKeptHTTP1 is the MaxIdleConnsPerHost of the Source's own transport
// for pauses (ownClients): below zero, net/http keeps no HTTP/1
// connection for a next request (its tryPutIdleConn), so each pause dials
// its own; an HTTP/2 connection, pooled by its HTTP/2 transport, is still
// shared. A server closes a
// kept-alive connection when its keep-alive timeout fires, and a pause
// sent on it then is written into a connection the server no longer
// reads: EOF or a reset, no answer, and nothing tells the client that the
// server did not read it, so net/http does not send a POST again (only a
// request of which no byte was written, or one marked idempotent), and
// neither may the Source: the server may go on with a pause it read
// (docs/faults.md row 2480). Of the other ways out, an Idempotency-Key
// header makes net/http send the pause again after such an EOF, also to a
// server that read it and then closed (a crash, a proxy's timeout), and
// AgentENV's API says nothing of the header; httptrace's WroteRequest
// fires for the pause the server never read as for one it did (the write
// went into the socket buffer), so it cannot tell the two apart. A
// connection of its own, which no keep-alive timeout closes before its
// first request, costs a dial (on loopback 0.18 ms a request against 0.04
// ms on a kept connection, at a load of 5 on 2 cores) against pauses of
// milliseconds to minutes. The listings keep their connections: a GET,
// net/http sends one again itself when a kept connection closes under it
// (docs/faults.md row 2621). HTTP/2 keeps its connection: a server
// ends it with GOAWAY, which names the last stream it processed, and Go's
// HTTP/2 transport sends the ones after it again on a new connection.
const noKeptHTTP1 = -1

// maxBody bounds how much of a response body is read: a 2xx answer longer
// than this is a permanent error that says so.
const maxBody = 32 << 20

// Config describes the server's API and how the Source talks to it. Its
// zero value is the generic shape: GET /sandboxes answers a JSON array of
// {"id": ..., "state": ...} objects, the ones in state "running" need
// preserving, and POST /sandboxes/{id}/pause pauses one; no API key, no
// pagination, no sizes. AgentENV returns the Config of AgentENV's node API.
type Config struct {
	// Client sends the requests. Nil means a client of the Source's own
	// on net/http's transport (a copy of http.DefaultTransport, or one
	// with net/http's default settings when a program put another
	// RoundTripper there, which the Source's requests then do not go
	// through), with no overall timeout (requests are bounded by their contexts)
	// that follows a redirect only on the same host, with the same method,
	// and from https only to https (a list path's canonical URL); any
	// other 3xx answer is a permanent *StatusError, so the API key never
	// leaves the server's host, nor goes over plain HTTP from an https
	// base URL. Whatever the client, an answer to a request that a redirect
	// changed into another method (a 302 turns POST into GET) is a
	// permanent error, never a pause. Over HTTP/2 (an https server that
	// offers it), the Source's own client sends a PING on a connection
	// it has read nothing from for 2 s and closes it when the PING is not
	// answered within 3 s: the requests on a connection that went dead
	// silently fail then, as having had no answer (transient), and the
	// next request dials, where they waited to their contexts' end. Over
	// HTTP/1 the Source's own client keeps no connection for a next
	// pause: each pause dials its own, for a pause sent on a
	// kept-alive connection as the server's keep-alive timeout closes it
	// reaches a server that no longer reads it, and gets no answer that
	// net/http may send again; the listings, which net/http sends again
	// then, keep theirs. A Client of your own that speaks HTTP/2
	// should set its Transport's HTTP2.SendPingTimeout, and one that
	// speaks HTTP/1 its Transport's MaxIdleConnsPerHost to -1.
	Client *http.Client

	// APIKey, when not empty, is sent in the header APIKeyHeader on every
	// request, its surrounding white space trimmed: HTTP strips it from a
	// header value, so it is never part of the key a server checks (a
	// Secret made from a file ends in a newline). It must hold no other
	// control character but a tab, which no header can carry: New fails
	// naming where it is. A refusal of it (401, 403) is permanent: the
	// key is never read again, so no retry before a restart sends another
	// (APIKeyFile is).
	APIKey string
	// APIKeyFile, when not empty, names a file holding the API key
	// (surrounding white space trimmed), sent as APIKey is. It is read
	// again whenever it changed (its inode, size or modification time),
	// so a key rotated in a mounted Kubernetes Secret is sent from the
	// next request on: a process that read it once would send the old
	// key until it restarted, and at its drain every pause would be
	// refused. New fails if the file cannot be read, is empty or holds
	// what APIKey must not; a later read that fails, or finds it so, keeps
	// the last key and is logged at Warn. Set APIKey or APIKeyFile, not
	// both.
	//
	// A key rotated in a Secret reaches the server before the file: the
	// kubelet writes a mounted Secret at its next sync, its sync period
	// plus its cache's TTL later, a minute or more. A drain in that window
	// has its requests refused. So with APIKeyFile a refusal, 401 or 403,
	// is transient, for the listing and for a pause alike: the Preserver
	// retries it with its backoff while the phase has time, each request
	// reading the file again if it changed, and the sandboxes are
	// preserved once the new key is there: a refused request's wait for
	// its retry ends when the file changes (read every 100 ms while
	// refusals wait: the error's WaitRetry, see pause.Sandbox), so the
	// pauses of a 70 s window go out within 100 ms of the key, where the
	// backoff's wait in progress (up to 10 s, jitter 0.5: 15 s) was
	// waited out; it gives up when no retry fits before the phase deadline
	// (or when a policy of one's own stops: pause.Config.BackOff).
	// The error says which key file was refused and for how long its key
	// had not changed; the first refusal of each key is logged at Info,
	// and so is the first acceptance of a later one. A sandbox whose time
	// ends first is Failed with that error. One exception keeps a refusal
	// that is not the key's (a 403 for one sandbox) from being retried
	// until the phase ends: a refusal of a sandbox's pause (or of the
	// listing) is permanent again when the server accepted the same key
	// for a request sent after that sandbox's last refusal (the listing's)
	// came back; another sandbox's refusal proves nothing, so a rotation
	// after one sandbox's own 403 is still waited out.
	APIKeyFile string
	// APIKeyHeader names the API key's header; empty means "X-API-Key". It
	// must be a header's name alone (no colon, no space): New fails
	// otherwise.
	APIKeyHeader string

	// ListPath is the path, relative to the base URL, that lists the
	// sandboxes with GET; it may carry a query. Empty means "/sandboxes".
	ListPath string
	// FallbackListPath is a second list path, used from the first time
	// ListPath answers 404 Not Found on: a server that has not got the
	// newer endpoint yet (AgentENV's deprecated GET /sandboxes behind GET
	// /v2/sandboxes). Empty means none, and a 404 from ListPath is a
	// permanent error.
	FallbackListPath string
	// PageTokenHeader and PageTokenParam follow the list across pages:
	// when an answer carries the response header PageTokenHeader, the
	// Source asks for the next page with the header's value in the query
	// parameter PageTokenParam, until an answer comes without it (AgentENV:
	// "x-next-token" and "nextToken"). PageTokenHeader must be a header's
	// name alone (no colon, no space): New fails otherwise. All the pages
	// of one listing share one list timeout; a sandbox listed on two pages
	// counts once, and a
	// token the server sends twice ends the listing with a permanent error
	// instead of a loop. Both empty, the default, means no pagination; one
	// without the other is an error. A listing whose answer ends it and yet
	// says a next page follows, in an x-next-token header (AgentENV's, when
	// PageTokenHeader is another) or a Link header with rel="next" (which
	// the Source cannot follow), fails with a permanent error naming the
	// fix: its first pages taken for all of it, the sandboxes on the
	// others would be missed.
	PageTokenHeader, PageTokenParam string

	// ItemsField is the field of a top-level object that holds the array
	// of sandboxes; empty means the answer is the array itself.
	ItemsField string
	// IDField is the field of each element that holds its ID (a string or
	// a number); empty means "id".
	IDField string
	// StateField is the field of each element that holds its state; empty
	// means "state". An element without it, or with null, counts as
	// running.
	StateField string
	// NoStateField says the elements carry no state: every listed sandbox
	// needs preserving (a list endpoint that returns only running ones).
	// StateField and RunningStates are then not used.
	NoStateField bool
	// RunningStates are the state values (compared case-insensitively) of
	// the sandboxes that need preserving; nil means "running".
	RunningStates []string
	// SizeField, when not empty, is the numeric field of each element that
	// holds its size, in units of SizeUnit bytes (AgentENV's memoryMB, unit
	// 1<<20: the memory a pause writes), and makes the sandboxes List
	// returns pause.Sized: the Preserver orders them by size (longest first
	// when time is ample, shortest first when the deadline binds) and
	// estimates each pause from it until it has measured pauses. A sandbox
	// without the field, or with a size that is not a positive number, has
	// no size.
	SizeField string
	// SizeUnit is the bytes per unit of SizeField; zero means 1. It must
	// be >= 0.
	SizeUnit int64

	// PauseMethod is the HTTP method of the pause request; empty means
	// POST. It must be an HTTP token (no space): New fails otherwise.
	PauseMethod string
	// PausePath is the path template that pauses one sandbox; "{id}" in it
	// is replaced by the path-escaped sandbox ID. Empty means
	// "/sandboxes/{id}/pause".
	PausePath string
	// GoneStatus are the HTTP statuses (4xx) of a pause answer that mean
	// the sandbox is gone or already preserved (pause.ErrGone); nil means
	// 404 and 410. A 409 not listed here is settled by listing again (see
	// Source), or retried with RetryConflict.
	GoneStatus []int
	// RetryConflict says the server answers 409 Conflict only for a
	// sandbox it cannot pause yet, never for one already paused or being
	// paused: AgentENV, whose pause answers 204 for a paused sandbox and
	// joins a pause in progress, and answers 409 for one being created,
	// resumed, snapshotted or forked, or running again after a pause it
	// joined failed; each runs again afterwards. A 409 is then transient,
	// retried in the time left (the sandbox is Failed if it never becomes
	// pausable), instead of being settled by listing again, which would
	// take such a sandbox, not listed running while in transition, for
	// gone. A 409 whose body names the state paused, AgentENV's way
	// ("sandbox cannot be paused from paused state", as a server that
	// answers the API spec's 409 for a paused sandbox would), is gone
	// (pause.ErrGone: already preserved), or preserved when a pause of
	// this sandbox sent before got no answer (its timeout: the server
	// went on with it); one being paused ("pausing") is retried, and
	// settled by the answer once that pause has ended: a gone answer then
	// is a loss (that pause may have failed and the server removed the
	// sandbox, as AgentENV does), never pause.ErrGone.
	RetryConflict bool

	// ListTimeout bounds each listing (and always the caller's context).
	// Zero means 10 s; a negative timeout means the context alone. A
	// listing it cuts fails naming it ("no answer before the list timeout
	// (Config.ListTimeout, 10s) ended it"), as a pause PauseTimeout cuts
	// does, and one its context cut names the context's cause, if any.
	ListTimeout time.Duration
	// PauseTimeout bounds each pause request, counted from when it is
	// sent. Zero, the default, leaves the bound to the caller's context
	// (the Preserver's per-sandbox bound and phase deadline): a pause the
	// client gives up on keeps running on the server, so a short timeout
	// turns a slow pause into a failed one without saving any time. It must
	// be >= 0.
	PauseTimeout time.Duration
	// MaxInFlight caps how many pause requests are on the wire at once,
	// whatever the Preserver's limit; zero, the default, means no cap of
	// the Source's own. The Source lowers its limit below the cap when the
	// server answers 429 (see Source). It must be >= 0.
	MaxInFlight int

	// Logger receives the Source's log lines; nil discards them.
	Logger *slog.Logger
	// TracerProvider makes the "httpsource.List" and "httpsource.Pause"
	// spans; nil means otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the one instrument, the histogram
	// drainkit.httpsource.request.duration (s) by
	// drainkit.httpsource.operation ("list" or "pause"),
	// http.request.method, and http.response.status_code (with error.type
	// the same code, as a string, for a status of 400 or more, as the
	// OpenTelemetry HTTP client conventions say, and with what cut it for
	// a 2xx whose body was cut), or error.type alone when no answer came:
	// "timeout", "canceled" for a request its context's cancellation cut,
	// or "_OTHER"; nil means
	// otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

// AgentENV returns the Config of AgentENV's node API
// (src/api/spec/paths/sandboxes.yml): list with GET /v2/sandboxes, with no
// state filter, following the x-next-token header into the nextToken
// parameter, and with the deprecated GET /sandboxes when v2 answers 404;
// sandboxes are objects keyed by sandboxID whose state "running" needs
// preserving and whose memoryMB is their size (pause.Sized, in bytes).
// Without a filter AgentENV shows a sandbox being created, resumed or
// deleted as running, and one being paused, snapshotted or forked as
// paused; state=running would list only the ones running at that moment,
// so a sandbox resuming through the preserve phase, which runs afterwards,
// would be missing from the Report. Pause with POST
// /sandboxes/{sandboxID}/pause, where 204 is done (also for a sandbox
// already paused, or paused by a pause in progress, which the request
// joins), 404 gone, and 409 a sandbox in transition (creating, resuming,
// snapshotting, forking), retried (RetryConflict). A pause that joined
// someone else's pause which then failed terminally is answered 404 too,
// once AgentENV has removed the sandbox: the answer cannot be told from a
// deletion's. After a 409 naming that pause ("cannot be paused from
// pausing state": AgentENV gives up waiting for it after 60 s) the
// sandbox is Failed, counted lost, its error naming both causes; when the
// joined pause ends within the request's wait, nothing tells the two
// apart, and the sandbox is Vanished. Set APIKey (sent in X-API-Key), and
// change any other field, on the value it returns.
func AgentENV() Config {
	return Config{
		ListPath:         "/v2/sandboxes",
		FallbackListPath: "/sandboxes",
		PageTokenHeader:  "x-next-token",
		PageTokenParam:   "nextToken",
		IDField:          "sandboxID",
		SizeField:        "memoryMB",
		SizeUnit:         1 << 20,
		PausePath:        "/sandboxes/{id}/pause",
		RetryConflict:    true,
	}
}

// config is a Config with every default filled in.
type config struct {
	client        *http.Client // the listings'
	pauseClient   *http.Client // the pauses': client, or the Source's own for pauses (ownClients)
	apiHeader     string
	apiKey        string
	keyFile       *keyFile // Config.APIKeyFile; nil: apiKey
	listPath      string
	pauseMethod   string
	pausePath     string
	itemsField    string
	idField       string
	stateField    string // "": every listed sandbox is running
	stateName     string // the state field, NoStateField or not: what an item's state is (listedstate)
	running       []string
	gone          []int
	retryConflict bool          // a 409 is transient, not settled by listing again
	fallbackList  string        // list path used once listPath answers 404
	tokenHeader   string        // response header holding the next page's token
	tokenParam    string        // query parameter that sends it back
	sizeField     string        // numeric field of each element: its size
	sizeUnit      int64         // bytes per unit of the size field
	listTimeout   time.Duration // 0: the context alone
	pauseTimeout  time.Duration
	maxInFlight   int
	logger        *slog.Logger
	tp            trace.TracerProvider
	mp            metric.MeterProvider
}

// resolve fills in the defaults of c's zero fields.
func (c Config) resolve() config {
	r := config{
		client: c.Client, apiHeader: c.APIKeyHeader, apiKey: strings.TrimSpace(c.APIKey),
		listPath: c.ListPath, pauseMethod: c.PauseMethod, pausePath: c.PausePath,
		itemsField: c.ItemsField, idField: c.IDField, stateField: c.StateField,
		running: c.RunningStates, gone: c.GoneStatus, retryConflict: c.RetryConflict, fallbackList: c.FallbackListPath,
		tokenHeader: c.PageTokenHeader, tokenParam: c.PageTokenParam,
		sizeField: c.SizeField, sizeUnit: c.SizeUnit,
		listTimeout: c.ListTimeout, pauseTimeout: c.PauseTimeout, maxInFlight: c.MaxInFlight,
		logger: c.Logger, tp: c.TracerProvider, mp: c.MeterProvider,
	}
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&r.apiHeader, defaultAPIKeyHeader)
	def(&r.listPath, defaultListPath)
	def(&r.pauseMethod, http.MethodPost)
	def(&r.pausePath, defaultPausePath)
	def(&r.idField, defaultIDField)
	def(&r.stateField, defaultStateField)
	r.stateName = r.stateField
	if c.NoStateField {
		r.stateField, r.running = "", nil
	} else if r.running == nil {
		r.running = []string{defaultRunningState}
	}
	if r.gone == nil {
		r.gone = []int{http.StatusNotFound, http.StatusGone}
	}
	if r.sizeUnit == 0 {
		r.sizeUnit = 1
	}
	switch {
	case r.listTimeout == 0:
		r.listTimeout = defaultListTimeout
	case r.listTimeout < 0:
		r.listTimeout = 0
	}
	return r
}

// A Source lists the sandboxes of a sandbox server that need preserving and
// preserves them through the server's own HTTP API. It is a pause.Lister;
// the sandboxes it lists are pause.Sandboxes whose Preserve sends the pause
// request.
//
// Error classes, as the Preserver expects them: a gone status (404, 410)
// wraps pause.ErrGone, except after a 5xx answer to an earlier pause of the
// same sandbox, or none (its timeout, a connection reset, its context
// ending while the request was out: the server may have gone on with it),
// that no pause succeeded since: a server that removes a sandbox whose pause failed
// (AgentENV, when the VM cannot be put back) has lost it, so that gone
// status is a permanent error, the sandbox Failed in the Report, never
// Vanished; nor is a gone status for a sandbox a listing made then still
// shows running (a pause path the server does not have answers every
// pause 404): it is transient, and its error names Config.PausePath (a
// sandbox's first gone answer is settled by the listing that gave it; a
// later one by a listing made since, one the gone answers share, made one
// at a time; one that fails transiently leaves the answer transient);
// 408, 429, 5xx and connection errors are transient;
// any other 4xx is wrapped in backoff.Permanent. A 409 Conflict is settled
// by listing again: no longer listed running means pause.ErrGone (already
// paused or gone), or, after a pause of the sandbox that got no answer (or
// a 202 never shown done), preserved by that pause, which the server went
// on with; still listed running means transient (a state the
// server will not pause yet), a listing that fails leaves it in the
// listing's class (transient or permanent), naming the listing's error;
// with Config.RetryConflict (AgentENV, whose 409 means a sandbox in
// transition) it is transient at once. A 401 or 403, permanent as any
// other 4xx with Config.APIKey, is transient with Config.APIKeyFile, the
// listing's and a pause's, while the file may yet get the server's new
// key (see Config.APIKeyFile). errors.As finds the *StatusError in each.
// A pause that gets no answer after the server answered an earlier pause
// of the same sandbox with a 5xx, or a 409 naming a pause in progress,
// names that answer in its error: the Report then says why the sandbox
// was paused again, where a pause the deadline cut said "context deadline
// exceeded" alone (errors.As does not find that answer: it is no answer to
// this pause); after an earlier pause that got no answer either (the
// preserve phase's, which the server may still be going on with, before
// the final sweep's), it names the first such one. A pause that failed
// before its client wrote it (a dial refused, a wait for a connection
// under its Transport's MaxConnsPerHost, or for an HTTP/2 stream under
// the server's limit, that its context ended) was not sent, and is none
// of these: its error says "not sent", and a gone answer after it is the
// sandbox gone. That is known of net/http's own transport (an
// *http.Transport, the Source's own client's), which says when it has
// written a request's headers; with another RoundTripper such a pause
// counts as one that got no answer.
//
// A 2xx answer to a pause is the sandbox preserved, its body cut or not
// (a pause reads none), except 202 Accepted,
// which says the pause has begun, not that it is done: the sandbox is
// preserved once a listing no longer shows it in a running state (polled
// from 50 ms, each wait twice the last, up to 1 s apart, and a listing
// answered overloaded with a Retry-After at the time it names, none when
// that is past the context's deadline), and if one still does when the
// context ends, Preserve returns an error that names the 202; the server
// has that pause and may go on with it, so a gone answer to a later pause
// of the sandbox counts it lost, as after a pause that got no answer.
//
// Overload: when the server answers 429 (or 503 with Retry-After) while other
// pause requests of this Source were on the wire, the Source lowers the
// number it sends at once to what the server handled and queues the request
// for the next free slot, first come first served; the server then stays as
// busy as with one request at a time, and no worse. When nothing else was on
// the wire, Retry-After is waited if it ends before the context's deadline
// and, for a Preserve a pause.Preserver calls, before its Run's phase
// deadline (the pause sent again then is a new start, which the Preserver
// makes none of past it: its context runs on to the hard deadline for the
// pauses in flight only); otherwise Preserve returns the transient error at
// once, and a retry of the same sandbox before the Retry-After time waits
// for it or fails at once.
// That error, and one of a 202 Accepted pause whose confirming listing
// asks for no listing before the deadline, carries the time the server
// named (RetryAt): a Preserver ends the sandbox Failed at once, not
// retrying it to the phase deadline in the slot it holds (see
// pause.Sandbox).
// A pause whose context ends while it waits for a slot returns the
// context's error naming why it waited: its own overload answer (errors.As
// finds that *StatusError), or the one that lowered the limit; for a
// Preserve a pause.Preserver calls, the wait ends at its Run's phase
// deadline too, and the pause is not sent ("the phase deadline passed"),
// as the Preserver starts none past it; nor is it when a slot is free at
// once but the phase deadline has come (its overload answer came past
// it). A Retry-After ending at the phase deadline itself does not fit
// before it. A listing
// answered overloaded with a Retry-After fails with an error whose RetryAt
// is the time the server named: a Preserver lists again then, not when its
// backoff says, and not at all when that time is past the phase deadline
// (see pause.Lister). A Retry-After that is neither a number of seconds
// nor an HTTP date is ignored, the backoff left to space the retry: the
// error says so, and so does a line at Warn for each value that comes
// after another.
//
// A Source is safe for concurrent use.
//
// A Source not made by New (the zero value, or a nil *Source) sends no
// request: List and RunningIDs return, and the Preserve of each sandbox
// Sandbox returns, the permanent error "httpsource: Source not made by
// httpsource.New"; Limit is 0 and CloseIdleConnections does nothing.
type Source struct {
	cfg     config
	base    *url.URL
	listURL string // base + list path, resolved once
	lim     *limiter
	tracer  trace.Tracer
	latency metric.Float64Histogram

	fallbackURL string      // base + fallback list path, "" without one
	onFallback  atomic.Bool // the list path answered 404: list with the fallback
	toldUnnamed atomic.Bool // a running sandbox without an ID was logged

	mu           sync.Mutex
	notBefore    map[string]holdOff // per sandbox, from Retry-After
	pauseFailed  map[string]error   // per sandbox, its last pause that got a 5xx answer or none, a 202 never shown done (unconfirmed), or a 409 naming one in progress
	lastOverload *StatusError       // the last overload answer to a pause: why the limit is low
	keyRefused   map[string]uint64  // per chain of requests, its last refusal of Config.APIKeyFile's key (see keyRefusal)

	checks runningChecks     // the listings that settle gone answers to pauses (stillListed)
	goneAt map[string]uint64 // per sandbox, checks.sending() when its last gone answer was settled

	badRetryAfter logonce.Failures // Retry-After values ignored, so that one a server repeats is logged once
}

// New returns a Source for the server whose API is at baseURL (for example
// "http://127.0.0.1:8080"), configured by c (its zero value is the generic
// shape). It fails, naming the field, when baseURL is not an absolute
// http(s) URL, a path does not start with "/", the pause path has no
// "{id}", the pause method, the API key's header name or the page token's
// header name is no HTTP token, a running state list is empty, pagination
// has only one of its two fields, a gone status is not a 4xx code, a
// number is negative, or the API key (or its file) holds a byte no HTTP
// header can carry.
func New(baseURL string, c Config) (*Source, error) {
	base, err := validate(baseURL, c)
	if err != nil {
		return nil, err
	}
	cfg := c.resolve()
	if c.APIKeyFile != "" {
		if cfg.keyFile, err = readKeyFile(c.APIKeyFile); err != nil {
			return nil, err
		}
	}
	cfg.pauseClient = cfg.client
	if cfg.client == nil {
		cfg.client, cfg.pauseClient = ownClients()
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	s := &Source{cfg: cfg, base: base, lim: newLimiter(cfg.maxInFlight), notBefore: map[string]holdOff{}, pauseFailed: map[string]error{},
		keyRefused: map[string]uint64{}, goneAt: map[string]uint64{}}
	s.listURL = s.resolve(cfg.listPath)
	if cfg.fallbackList != "" {
		s.fallbackURL = s.resolve(cfg.fallbackList)
	}
	s.tracer = cfg.tp.Tracer(scope)
	meter := cfg.mp.Meter(scope)
	if s.latency, err = meter.Float64Histogram(metricRequestDuration,
		otelx.Duration("Duration of the HTTP requests to the sandbox server, by operation and status code.")...); err != nil {
		return nil, fmt.Errorf("httpsource: meter: %w", err)
	}
	return s, nil
}

func validate(baseURL string, c Config) (*url.URL, error) {
	base, err := url.Parse(baseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" ||
		base.RawQuery != "" || base.Fragment != "" {
		return nil, fmt.Errorf("httpsource: baseURL must be an absolute http(s) URL without query, got %q", baseURL)
	}
	// A URL's syntax takes any digits for its port: a typo's extra digit
	// ("http://127.0.0.1:80000") or 0 would make a Source whose every request
	// fails, a server never listed (docs/faults.md row 1185).
	if p := base.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("httpsource: baseURL %s: its port must be 1 to 65535, got %s", baseURL, p)
		}
	}
	path := func(field, v string) error {
		if v != "" && !strings.HasPrefix(v, "/") {
			return fmt.Errorf("httpsource: Config.%s must start with \"/\", got %q", field, v)
		}
		return nil
	}
	errs := []error{path("ListPath", c.ListPath), path("FallbackListPath", c.FallbackListPath), path("PausePath", c.PausePath)}
	// A method or a header name no request can carry is refused by
	// http.NewRequest or Go's transport before anything is sent, at every
	// listing and every pause: found here, not when the drain starts, by
	// the check the transport makes (a token, RFC 9110 section 5.6.2, as a
	// method is too).
	if c.PauseMethod != "" && !httpguts.ValidHeaderFieldName(c.PauseMethod) {
		errs = append(errs, fmt.Errorf("httpsource: Config.PauseMethod must be an HTTP method (a token: letters, digits, !#$%%&'*+-.^_`|~), got %q", c.PauseMethod))
	}
	if c.APIKeyHeader != "" && !httpguts.ValidHeaderFieldName(c.APIKeyHeader) {
		errs = append(errs, fmt.Errorf("httpsource: Config.APIKeyHeader must be a header name (a token: letters, digits, !#$%%&'*+-.^_`|~; no colon, no space), got %q", c.APIKeyHeader))
	}
	// A token header no answer can carry matches none: the listing would
	// end at its first page, with no error, the others' sandboxes missed.
	if c.PageTokenHeader != "" && !httpguts.ValidHeaderFieldName(c.PageTokenHeader) {
		errs = append(errs, fmt.Errorf("httpsource: Config.PageTokenHeader must be a header name (a token: letters, digits, !#$%%&'*+-.^_`|~; no colon, no space), got %q", c.PageTokenHeader))
	}
	if c.PausePath != "" && !strings.Contains(c.PausePath, "{id}") {
		errs = append(errs, fmt.Errorf("httpsource: Config.PausePath must contain \"{id}\", got %q", c.PausePath))
	}
	if (c.PageTokenHeader == "") != (c.PageTokenParam == "") {
		errs = append(errs, fmt.Errorf("httpsource: Config.PageTokenHeader and Config.PageTokenParam must be set together, got %q and %q", c.PageTokenHeader, c.PageTokenParam))
	}
	if flaw := headerFlaw(strings.TrimSpace(c.APIKey)); flaw != "" {
		errs = append(errs, fmt.Errorf("httpsource: Config.APIKey: %s", flaw))
	}
	if c.APIKey != "" && c.APIKeyFile != "" {
		errs = append(errs, fmt.Errorf("httpsource: set Config.APIKey or Config.APIKeyFile (%s), not both", c.APIKeyFile))
	}
	if c.RunningStates != nil && len(c.RunningStates) == 0 && !c.NoStateField {
		errs = append(errs, errors.New("httpsource: Config.RunningStates must not be empty (nil means \"running\"; NoStateField takes every listed sandbox)"))
	}
	for _, g := range c.GoneStatus {
		if g < 400 || g > 499 {
			errs = append(errs, fmt.Errorf("httpsource: Config.GoneStatus must hold 4xx codes, got %d", g))
		}
	}
	if c.SizeUnit < 0 {
		errs = append(errs, fmt.Errorf("httpsource: Config.SizeUnit must be >= 0, got %d", c.SizeUnit))
	}
	if c.PauseTimeout < 0 {
		errs = append(errs, fmt.Errorf("httpsource: Config.PauseTimeout must be >= 0, got %v", c.PauseTimeout))
	}
	if c.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("httpsource: Config.MaxInFlight must be >= 0, got %d", c.MaxInFlight))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return base, nil
}

// List returns the sandboxes the server reports in a running state, in the
// order the server lists them (page after page). It implements
// pause.Lister. With Config.SizeField the sandboxes are pause.Sized. It
// returns by ctx's deadline and the list timeout; its errors are classified
// as described on Source.
//
// A running sandbox listed without an ID (the field missing, null, "" or
// not a string or number) is returned with the ID "": no request can name
// it, and a pause.Preserver accounts for it as a flawed element, a Failed
// entry, while it preserves the others (the first such listing is logged,
// with the fields the server sent). Only a listing in which no element has
// an ID, running or not, the mark of a wrong Config.IDField or not a
// listing of sandboxes, is an error; so is an answer that says more pages
// follow than the Source follows (see Config.PageTokenHeader). An answer
// that is not JSON of the configured shape is a permanent error, but one
// that ended mid-body (the start of a JSON document: a connection closed
// before the end of a body the close delimits) is transient, and so is an
// empty one the close delimits, which the close may have cut before its
// first byte; an empty answer that said where it ends (Content-Length: 0,
// chunked's last chunk) is permanent.
//
// A page after the first that fails (its request, or an answer that is no
// listing: AgentENV's GET /v2/sandboxes answering page 2 with a 503)
// fails the listing, and List returns the sandboxes of the pages before
// it with the error, as a pause.Lister does: a Preserver preserves them
// and lists again, the error retried or not as it is classified. A client
// error to a page after the first (but 401 and 403) refuses that page's
// token, which may have expired: it is transient, so that the listing is
// made again from page 1, where a wrong path's is permanent.
func (s *Source) List(ctx context.Context) ([]pause.Sandbox, error) {
	if !s.made() {
		return nil, errNotMade
	}
	items, err := s.list(ctx)
	if len(items) == 0 {
		return nil, err
	}
	out := make([]pause.Sandbox, len(items))
	for i, it := range items {
		if it.size > 0 {
			out[i] = &sizedSandbox{sandbox{src: s, id: it.id, state: it.state, listed: true}, it.size}
		} else {
			out[i] = &sandbox{src: s, id: it.id, state: it.state, listed: true}
		}
	}
	return out, err
}

// RunningIDs returns the IDs of the sandboxes the server reports in a
// running state: what a preStop wait polls. Same bounds and errors as
// List, but no IDs with an error: its callers ask which sandboxes run, and
// a listing that failed past its first page cannot say which do not.
func (s *Source) RunningIDs(ctx context.Context) ([]string, error) {
	if !s.made() {
		return nil, errNotMade
	}
	items, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.id
	}
	return ids, nil
}

// An item is one running sandbox of a listing.
type item struct {
	id    string // "" for a sandbox listed without one
	size  int64  // bytes; 0: unknown
	state listed // the element's state field (listedstate.Of)
}

// maxPages bounds one listing, so a server that never stops sending tokens
// cannot hold it until the list timeout.
const maxPages = 10000

// list fetches every page of the listing.
func (s *Source) list(ctx context.Context) ([]item, error) {
	ctx, span := s.tracer.Start(ctx, "httpsource.List")
	defer span.End()
	ctx, cancel := withTimeout(ctx, s.cfg.listTimeout, "list", "Config.ListTimeout")
	defer cancel()
	items, pages, err := s.pages(ctx)
	span.SetAttributes(attribute.Int(attrSandboxes, len(items)), attribute.Int(attrPages, pages))
	if err != nil {
		spanError(span, err)
		if se := (*StatusError)(nil); errors.As(err, &se) && se.Overloaded() && !se.retryAt.IsZero() {
			err = &retryLater{err: err, at: se.retryAt}
		}
	}
	return items, err // with an error, the pages that answered (see partial)
}

// A retryLater is the error of a request the server answered overloaded
// with a Retry-After: its RetryAt is when the server asked to be asked
// again. A pause.Preserver lists again then (see pause.Lister), where its
// backoff listed sooner (the server's capacity spent on refusals) or
// later (the phase's time spent waiting); a pause carries it only when
// that time is past its context's deadline (the Source waits for an
// earlier one itself), and the Preserver then ends the sandbox Failed at
// once (see pause.Sandbox), where its backoff retried it to the phase
// deadline, each retry failing at once, its slot held.
type retryLater struct {
	err error
	at  time.Time
}

func (e *retryLater) Error() string { return e.err.Error() }
func (e *retryLater) Unwrap() error { return e.err }

// RetryAt returns the time the answer's Retry-After names: when it came
// plus the wait it asked for.
func (e *retryLater) RetryAt() time.Time { return e.at }

func (s *Source) pages(ctx context.Context) ([]item, int, error) {
	target := s.listURL
	if s.onFallback.Load() {
		target = s.fallbackURL
	}
	var out []item
	seen := map[string]bool{}   // IDs already listed
	tokens := map[string]bool{} // tokens already followed
	token := ""
	var ids listingIDs
	for page := 1; ; page++ {
		u := target
		if token != "" {
			u = withQuery(target, s.cfg.tokenParam, token)
		}
		ans, err := s.do(ctx, "list", http.MethodGet, u)
		body, hdr := ans.body, ans.header
		if se := (*StatusError)(nil); errors.As(err, &se) {
			if se.StatusCode == http.StatusNotFound && page == 1 && target == s.listURL && s.fallbackURL != "" {
				s.cfg.logger.Info("httpsource: list path answered 404; listing with the fallback from now on",
					"list", redact(s.listURL), "fallback", redact(s.fallbackURL))
				s.onFallback.Store(true)
				target = s.fallbackURL
				page = 0
				continue
			}
			if err = s.keyRefusal(se, listChain); err == nil {
				err = classify(se, nil) // a 404 here is a wrong path, not a gone sandbox
				if page > 1 && tokenRefusal(se) {
					err = fmt.Errorf("%w (page %d: the server refused its page token, expired most likely: the listing is to be made again from its first page)", se, page)
				}
			}
		}
		if err != nil {
			return s.partial(out, page, ids, target, err)
		}
		s.keyAccepted(listChain)
		items, err := s.parse(body, page, &ids)
		switch {
		case err != nil && cutShort(body, err):
			return s.partial(out, page, ids, target, fmt.Errorf("httpsource: list %s: the answer ended mid-body, after %d bytes (its connection closed before the end of a body the close delimits): %w",
				redact(u), len(body), err))
		case err != nil && len(bytes.TrimSpace(body)) == 0 && ans.closeDelimited:
			// Nothing said where its body ends but the close, which may
			// have cut it before its first byte: an empty body whose end
			// was said (Content-Length: 0, chunked's last chunk) is no
			// listing, but this one may be a cut listing. Permanent, it
			// ended the Preserver's listings, its Report Unknown
			// (docs/faults.md row 2442).
			return s.partial(out, page, ids, target, fmt.Errorf("httpsource: list %s: the answer ended with its connection before its first byte (a body the close delimits, which the close may have cut): %w",
				redact(u), err))
		case err != nil:
			return s.partial(out, page, ids, target, backoff.Permanent(fmt.Errorf("httpsource: list %s: %w", redact(u), err)))
		}
		for _, it := range items {
			if it.id == "" || !seen[it.id] { // each sandbox without an ID is one
				seen[it.id] = true
				out = append(out, it)
			}
		}
		next := ""
		if s.cfg.tokenHeader != "" {
			next = hdr.Get(s.cfg.tokenHeader)
		}
		switch {
		case next == "":
			if err := s.unfollowed(hdr, page, target); err != nil {
				return nil, page, err
			}
			return s.named(out, page, ids, target)
		case tokens[next]:
			return nil, page, backoff.Permanent(fmt.Errorf("httpsource: list %s: the server sent next token %q twice", redact(target), next))
		case page >= maxPages:
			return nil, page, backoff.Permanent(fmt.Errorf("httpsource: list %s: more than %d pages", redact(target), maxPages))
		}
		tokens[next] = true
		token = next
	}
}

// tokenRefusal reports whether se, the answer to a page after the first,
// refuses that page's token: a client error, but for a refused key (401,
// 403: a key rotated between the pages is refused from page 1 on too)
// and the ones already transient (408, 429). Page 1, with the same path
// and key, was answered, so what the server refused is the token, which
// may expire (Kubernetes answers an expired continue token 410 Gone, other
// APIs 400): the error is transient, and a listing made again from page 1
// gets a new one. Permanent, as a wrong path is, it ended the Preserver's
// listing passes once page 1 showed nothing new, and the sandboxes of the
// later pages were neither preserved nor in the Report (docs/faults.md
// row 1761). AgentENV's tokens are cursors that do not expire.
func tokenRefusal(se *StatusError) bool {
	switch code := se.StatusCode; {
	case code == http.StatusUnauthorized, code == http.StatusForbidden, transient(code):
		return false
	default:
		return code >= 400 && code < 500
	}
}

// partial returns, with err, the running sandboxes of the pages before
// page, the one that failed (its request, or an answer that is no
// listing): a pause.Lister returns what it listed with its error, and the
// Preserver preserves those and lists again. None when page 1 failed, or
// when the pages before named no sandbox (named's error: not a listing of
// sandboxes). A listing the Source cannot follow past its last page (see
// unfollowed) and a server that repeats a token or sends too many pages
// give none: those are errors of the configuration or the server to fix,
// found at readiness.
func (s *Source) partial(out []item, page int, ids listingIDs, target string, err error) ([]item, int, error) {
	if page > 1 && len(out) > 0 {
		if got, _, nerr := s.named(out, page-1, ids, target); nerr == nil {
			return got, page, err
		}
	}
	return nil, page, err
}

// agentENVTokenHeader is the response header in which AgentENV's GET
// /v2/sandboxes sends the next page's token, absent on the last page.
const agentENVTokenHeader = "x-next-token"

// unfollowed returns the permanent error of an answer that ends the
// listing at page (it carries no Config.PageTokenHeader) and yet says a
// next page follows: an x-next-token header, AgentENV's (when it is not the
// configured header), or a Link header with rel="next" (RFC 8288), which
// the Source cannot follow. Read as the whole listing, its first pages
// would be taken for all of it: the sandboxes on the others never listed,
// neither preserved nor in the Report. Only these say so; no guess from
// the page's size or a body field, which a listing that fits on one page
// could match. It fails the listing, as a wrong IDField does: readiness
// (which lists) shows it before a drain depends on it.
func (s *Source) unfollowed(hdr http.Header, page int, target string) error {
	if tok := hdr.Get(agentENVTokenHeader); tok != "" && !strings.EqualFold(s.cfg.tokenHeader, agentENVTokenHeader) {
		configured := "no pagination is configured"
		if s.cfg.tokenHeader != "" {
			configured = fmt.Sprintf("not %q", s.cfg.tokenHeader)
		}
		return backoff.Permanent(fmt.Errorf("httpsource: list %s: the answer's %s header says more pages follow, and %s: "+
			"the sandboxes after page %d would be missed; set Config.PageTokenHeader %q and Config.PageTokenParam "+
			"to the query parameter that sends it back (AgentENV's node API: \"nextToken\"; AgentENV() sets both)",
			redact(target), agentENVTokenHeader, configured, page, agentENVTokenHeader))
	}
	if link, ok := nextLink(hdr); ok {
		return backoff.Permanent(fmt.Errorf("httpsource: list %s: the answer's Link header has rel=\"next\" (%s): more pages follow, "+
			"which the Source cannot follow (it follows a next-page token header, Config.PageTokenHeader), and the sandboxes after page %d "+
			"would be missed; set a page size that holds every sandbox in Config.ListPath's query, or the server's next-page token header "+
			"in Config.PageTokenHeader and Config.PageTokenParam",
			redact(target), redact(link), page))
	}
	return nil
}

// nextLink returns the target of the first link with the relation "next"
// in the Link headers (RFC 8288: <target>; rel="next" or a list of
// relations holding it, links separated by commas), and whether there is
// one. A header it cannot read says nothing: no signal is no next page.
func nextLink(hdr http.Header) (string, bool) {
	for _, v := range hdr.Values("Link") {
		for {
			v = strings.TrimLeft(v, " \t,")
			if !strings.HasPrefix(v, "<") {
				break
			}
			end := strings.IndexByte(v, '>')
			if end < 0 {
				break
			}
			link := v[1:end]
			v = v[end+1:]
			for {
				v = strings.TrimLeft(v, " \t")
				if !strings.HasPrefix(v, ";") {
					break
				}
				var name, value string
				name, value, v = linkParam(v[1:])
				if strings.EqualFold(name, "rel") && slices.ContainsFunc(strings.Fields(value), func(r string) bool {
					return strings.EqualFold(r, "next")
				}) {
					return link, true
				}
			}
		}
	}
	return "", false
}

// linkParam reads one parameter of a link, name[=value] with the value a
// token or a quoted string, from the start of v, and returns the rest.
func linkParam(v string) (name, value, rest string) {
	v = strings.TrimLeft(v, " \t")
	i := strings.IndexAny(v, "=;,")
	if i < 0 {
		return strings.TrimSpace(v), "", ""
	}
	name = strings.TrimSpace(v[:i])
	if v[i] != '=' {
		return name, "", v[i:]
	}
	v = strings.TrimLeft(v[i+1:], " \t")
	if !strings.HasPrefix(v, `"`) {
		j := strings.IndexAny(v, ";,")
		if j < 0 {
			return name, strings.TrimSpace(v), ""
		}
		return name, strings.TrimSpace(v[:j]), v[j:]
	}
	var b strings.Builder
	for j := 1; j < len(v); j++ {
		switch c := v[j]; {
		case c == '\\' && j+1 < len(v):
			j++
			b.WriteByte(v[j])
		case c == '"':
			return name, b.String(), v[j+1:]
		default:
			b.WriteByte(c)
		}
	}
	return name, "", "" // unterminated: malformed, no value
}

// withQuery returns target with the query parameter key set to value.
func withQuery(target, key, value string) string {
	u, err := url.Parse(target)
	if err != nil { // target was resolved from a validated base and path
		return target
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// Sandbox returns the sandbox with the given ID on this server, whether or
// not it is listed.
func (s *Source) Sandbox(id string) pause.Sandbox { return &sandbox{src: s, id: id} }

// CloseIdleConnections closes the connections of the Source's client that
// are kept open for a next request and carry none now (http.Client's
// CloseIdleConnections). A caller about to stop the server calls it first:
// a server whose graceful shutdown waits for its open connections (hyper's
// waits for one that never sent a request, which a Go transport can keep:
// a dial that finished after its request was given up) is not held by the
// Source's. A later request opens a new connection.
func (s *Source) CloseIdleConnections() {
	if s.made() {
		s.cfg.client.CloseIdleConnections()
		s.cfg.pauseClient.CloseIdleConnections()
	}
}

// Limit returns how many pause requests the Source currently sends at once;
// a very large number until the server answered 429 or Config.MaxInFlight set
// a cap.
func (s *Source) Limit() int {
	if !s.made() {
		return 0
	}
	return s.lim.current()
}

// errNotMade is the error of a Source not made by New: permanent, for no
// retry can make one.
var errNotMade = backoff.Permanent(errors.New("httpsource: Source not made by httpsource.New"))

// made reports whether s was made by New.
func (s *Source) made() bool { return s != nil && s.lim != nil }

func (s *Source) resolve(path string) string {
	return strings.TrimSuffix(s.base.String(), "/") + path
}

// ownClients returns the clients of the Source's own (Config.Client nil):
// one for the listings, which keeps its connections for the next listing,
// and one for the pauses, which keeps no HTTP/1 connection (noKeptHTTP1).
// A listing is a GET, which net/http sends again itself on a new
// connection when a kept one closes under it as the server's keep-alive
// timeout fires, and a drain lists again and again (each listing pass,
// the listing that settles a gone answer, each poll after a 202, the
// preStop wait's): dialing for each of its pages, 100 pages of 10,000
// sandboxes made 100 connections, a TLS handshake each without HTTP/2
// (docs/faults.md row 2621). Both send a PING on an HTTP/2 connection
// they have read nothing from for h2PingAfter, and follow only the
// redirects sameRequest does. Both resume the TLS sessions either had
// (resumeTLS).
func ownClients() (lists, pauses *http.Client) {
	kept, fresh := httpdefault.Transport(), httpdefault.Transport() // not kept.Clone(), which would set kept up for use now
	sessions := tls.NewLRUClientSessionCache(0)
	for _, tr := range []*http.Transport{kept, fresh} {
		tr.HTTP2 = &http.HTTP2Config{SendPingTimeout: h2PingAfter, PingTimeout: h2PingTimeout}
		resumeTLS(tr, sessions)
	}
	fresh.MaxIdleConnsPerHost = noKeptHTTP1
	return &http.Client{Transport: kept, CheckRedirect: sameRequest}, &http.Client{Transport: fresh, CheckRedirect: sameRequest}
}

// resumeTLS makes tr resume the TLS sessions kept in sessions, unless its
// TLS config has a cache of its own. Each pause dials a connection of its
// own (noKeptHTTP1), over HTTPS without HTTP/2 a TLS handshake each: with
// no session to resume, a full one, a certificate sent, verified and
// signed for each pause, on the node whose CPU the pauses need (on
// loopback, 2.2 ms of CPU a pause, client and server, against 0.89 ms
// resumed: docs/faults.md row 2622). Where tr has no TLS config, one is
// made only with ForceAttemptHTTP2 (net/http's own default transport
// has it): without, a TLS config would turn off the HTTP/2 net/http may
// attempt, and tr (a program's own in http.DefaultTransport) is left as it is.
func resumeTLS(tr *http.Transport, sessions tls.ClientSessionCache) {
	switch {
	case tr.TLSClientConfig != nil:
	case !tr.ForceAttemptHTTP2:
		return
	default:
		tr.TLSClientConfig = &tls.Config{}
	}
	if tr.TLSClientConfig.ClientSessionCache == nil {
		tr.TLSClientConfig.ClientSessionCache = sessions
	}
}

// connTracing reports whether c's transport is net/http's own, an
// *http.Transport, whose HTTP/1 and HTTP/2 paths both call httptrace's
// WroteHeaders for a request once its whole header block is written, and
// not when none of it is (HTTP/2), or not all of it (HTTP/1): a request
// that failed without it never reached the server as a request. Its
// GotConn is not that: over HTTP/2 a request gets the pooled connection
// first and may then wait for a stream (a server's MAX_CONCURRENT_STREAMS
// that the client keeps to), written never (docs/faults.md row 2624).
// Another RoundTripper (a wrapper, an in-process one) may send a request
// without calling either, so there a failure stays one the server may
// have had. Asked at each request: with a nil Transport, c sends through
// what http.DefaultTransport is then, where a program may have put
// another since the Source was made; asked in New, a pause it sent and
// whose answer was lost was taken for one never sent (docs/faults.md row
// 2626).
func connTracing(c *http.Client) bool {
	rt := c.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	_, ok := rt.(*http.Transport)
	return ok
}

// An answer is what do returns of a request's answer.
type answer struct {
	body   []byte      // a 2xx answer's
	header http.Header // with an error, a StatusError's answer's
	status int         // with an error, that of an answer whose body was cut or of a StatusError; 0 when none came
	// closeDelimited says a 2xx answer's body ended with its connection
	// (HTTP/1, neither a Content-Length nor chunks): nothing else said
	// where it ends, so an empty one may be an answer cut before its
	// first byte.
	closeDelimited bool
	// unsent says a request that got no answer never had its headers
	// written (connTracing): no request reached the server.
	unsent bool
}

// do sends one request and returns the body, header and status of a 2xx
// answer, or a classified error (with the status of the answer, 0 when
// none came).
func (s *Source) do(ctx context.Context, op, method, target string) (answer, error) {
	start := time.Now()
	var wroteHeaders atomic.Bool // sticky: a redirect's or a retry's request may come after
	tctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { wroteHeaders.Store(true) }})
	req, err := http.NewRequestWithContext(tctx, method, target, nil)
	if err != nil {
		return answer{}, backoff.Permanent(fmt.Errorf("httpsource: %s: %w", op, err))
	}
	req.Header.Set("Accept", "application/json")
	key, use := s.cfg.apiKey, keyUse{}
	if s.cfg.keyFile != nil {
		key, use = s.cfg.keyFile.send(s.cfg.logger)
	}
	if key != "" {
		req.Header.Set(s.cfg.apiHeader, key)
	}
	client := s.cfg.client
	if op == "pause" {
		client = s.cfg.pauseClient
	}
	traced := connTracing(client) // at each request: a nil Transport is http.DefaultTransport then
	resp, err := client.Do(req)
	if s.cfg.keyFile != nil {
		use = s.cfg.keyFile.answered(use)
	}
	result := attribute.String("error.type", errorType(ctx, err))
	var errStatus []attribute.KeyValue // an error status's error.type, as the HTTP client conventions set it
	defer func() {
		s.latency.Record(context.WithoutCancel(ctx), time.Since(start).Seconds(), metric.WithAttributes(append([]attribute.KeyValue{
			attribute.String(attrOperation, op), attribute.String("http.request.method", method), result}, errStatus...)...))
	}()
	if err != nil {
		unsent := answer{unsent: traced && !wroteHeaders.Load()}
		if ctx.Err() != nil && (errors.Is(err, ctx.Err()) || errors.Is(err, context.Cause(ctx))) {
			// Cut short, not failed: the server may have the request and
			// go on with it; the error says it never answered, and what
			// ended it (a timeout of the Source's, the caller's cause,
			// which the client returns in place of ctx.Err()); or, with
			// none of it written, that it was never sent.
			if unsent.unsent {
				return unsent, fmt.Errorf("httpsource: %s: not written to the server before %s: %w", op, endedBy(ctx), err)
			}
			return unsent, fmt.Errorf("httpsource: %s: no answer before %s: %w", op, endedBy(ctx), err)
		}
		return unsent, fmt.Errorf("httpsource: %s: %w", op, err) // transient: connection, timeout
	}
	defer resp.Body.Close()
	result = attribute.Int("http.response.status_code", resp.StatusCode)
	if resp.StatusCode >= 400 {
		errStatus = []attribute.KeyValue{attribute.String("error.type", strconv.Itoa(resp.StatusCode))}
	}
	if r := resp.Request; r != nil && r.Method != method {
		return answer{}, backoff.Permanent(fmt.Errorf("httpsource: %s %s %s: the server redirected it to %s %s, a different request: its %d is not an answer",
			op, method, redact(target), r.Method, r.URL.Redacted(), resp.StatusCode))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	switch {
	case err != nil && resp.StatusCode/100 == 2:
		// With its status: a listing needs its body, a pause does not
		// (preserve). Recorded as the failure it is, by what cut it:
		// its 200 alone read as a request that went well (docs/faults.md
		// row 2364).
		errStatus = []attribute.KeyValue{attribute.String("error.type", errorType(ctx, err))}
		// The status says the server took the key: a 403 that comes
		// after it is one sandbox's own, not a rotation the file lags
		// (docs/faults.md row 2441).
		s.acceptKey(use)
		return answer{status: resp.StatusCode}, fmt.Errorf("httpsource: %s %s: reading body: %w", op, redact(target), err)
	case err != nil:
		// The status came: it is the answer, whatever became of its body.
		// Taken for no answer, a 404 cut so made the next one "gone after
		// a pause that got no answer", counted lost (docs/faults.md row
		// 2165).
		body = fmt.Appendf(body, " (body cut: %v)", err)
	}
	if len(body) > maxBody && resp.StatusCode/100 == 2 {
		return answer{}, backoff.Permanent(fmt.Errorf("httpsource: %s %s: %d answer longer than %d MiB, not read further",
			op, redact(target), resp.StatusCode, maxBody>>20))
	}
	if resp.StatusCode/100 == 2 {
		s.acceptKey(use)
		return answer{body: body, header: resp.Header, status: resp.StatusCode, closeDelimited: closeDelimited(resp)}, nil
	}
	se := &StatusError{Op: op, URL: redact(target), StatusCode: resp.StatusCode, Body: snippet(body), key: use}
	s.readRetryAfter(se, resp.Header.Get("Retry-After"))
	return answer{header: resp.Header, status: resp.StatusCode}, se
}

// closeDelimited reports whether resp's body ends with its connection:
// HTTP/1, neither a Content-Length nor chunks (RFC 9112, section 6.3). An
// HTTP/2 body ends with its stream, which a reset cuts with an error.
func closeDelimited(resp *http.Response) bool {
	return resp.ProtoMajor == 1 && resp.ContentLength < 0 && len(resp.TransferEncoding) == 0
}

// acceptKey records that the server answered use, a request's use of the
// key from Config.APIKeyFile, with a 2xx: it took the key, whatever became
// of the answer's body. Nothing without a key file.
func (s *Source) acceptKey(use keyUse) {
	if s.cfg.keyFile != nil {
		s.cfg.keyFile.accept(use, s.cfg.logger)
	}
}

// errorType is the error.type of a request that failed with err, before
// its answer came or while its body was read: "timeout" when a deadline
// ended it (ctx's, a timeout of the Source's,
// the client's), "canceled" when its context was cancelled first (a
// readiness probe that gave up on the listing it asked for, a drain's
// Force: the caller's doing, not the server's), "_OTHER" for the rest (a
// connection refused or reset). Recorded "_OTHER", a cancelled request was
// counted with the server's failures (docs/faults.md row 2360).
func errorType(ctx context.Context, err error) string {
	cut := ctx.Err() != nil && (errors.Is(err, ctx.Err()) || errors.Is(err, context.Cause(ctx)))
	switch {
	case errors.Is(err, context.DeadlineExceeded), cut && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return "timeout"
	case cut:
		return "canceled"
	}
	return "_OTHER"
}

// readRetryAfter reads the Retry-After header v of se's answer into se. A
// value that is neither seconds nor an HTTP date is ignored, the retry
// left to the backoff, and said: in se's Error, and in a log line at Warn
// for each value that comes after another (a server that sends it on
// every answer is not logged at every answer).
func (s *Source) readRetryAfter(se *StatusError, v string) {
	if v == "" {
		return
	}
	now := time.Now()
	wait, ok := parseRetryAfter(v, now)
	se.retryAfter, se.RetryAfter = v, wait
	if ok {
		se.retryAt = now.Add(wait) // a saturated wait is still a time, 292 years on
		return
	}
	if news, _ := s.badRetryAfter.Fail(v); news {
		s.cfg.logger.Warn("httpsource: the server's Retry-After is "+badRetryAfter+": ignored, the retry keeps to the backoff",
			"retry_after", v, "op", se.Op, "url", se.URL, "status", se.StatusCode)
	}
}

// keyRefusal returns the transient error of se when it refuses the key
// from Config.APIKeyFile (see keyFile.refusal), nil otherwise: always nil
// with a static Config.APIKey, which no rotation changes before a
// restart, so its refusal stays permanent. chain names the requests se
// answered one of, whose last refusal it follows: "list", or "pause " and
// a sandbox's ID.
func (s *Source) keyRefusal(se *StatusError, chain string) error {
	if s.cfg.keyFile == nil {
		return nil
	}
	s.mu.Lock()
	prev := s.keyRefused[chain]
	s.mu.Unlock()
	err := s.cfg.keyFile.refusal(se, se.key, prev, s.cfg.logger)
	if err != nil {
		s.mu.Lock()
		s.keyRefused[chain] = se.key.answered
		s.mu.Unlock()
	}
	return err
}

// keyAccepted forgets the refusals of chain's key (see keyRefusal): one of
// its requests was answered.
func (s *Source) keyAccepted(chain string) {
	if s.cfg.keyFile == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keyRefused, chain)
}

// listChain is keyRefusal's chain of the listings; a sandbox's pauses are
// "pause " and its ID.
const listChain = "list"

// redact returns target with the password of its user information, if it
// has one, replaced by "xxxxx": what errors and log lines show of a URL.
func redact(target string) string {
	u, err := url.Parse(target)
	if err != nil || u.User == nil {
		return target
	}
	return u.Redacted()
}

// sameRequest is the CheckRedirect of the Source's own client: it follows
// a redirect (at most 10) that stays on the same host with the same method,
// and over https if the request was, and hands any other 3xx back as the
// answer. A 302 would turn the pause into a GET (of a proxy's sign-in
// page, answering 200), the API key would follow a redirect to another
// host, and to http:// the same host it would go in clear (a server
// behind a load balancer that ends TLS writes its canonical URL with the
// http:// it sees: nginx's trailing-slash redirect does).
func sameRequest(req *http.Request, via []*http.Request) error {
	switch first := via[0]; {
	case req.Method != first.Method || req.URL.Host != first.URL.Host ||
		first.URL.Scheme == "https" && req.URL.Scheme != "https":
		return http.ErrUseLastResponse
	case len(via) >= 10:
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// listingIDs is what a listing's elements had for IDs, across its pages.
type listingIDs struct {
	named   bool   // an element had an ID
	unnamed string // the first element without one, described
	running string // the first running element without one, described
}

// named returns a whole listing's running sandboxes, or the error for a
// listing with elements and no ID in any, running or not: whatever the
// server sends, it is not what IDField names, which is best known before
// a drain has sandboxes to pause.
func (s *Source) named(out []item, pages int, ids listingIDs, target string) ([]item, int, error) {
	switch {
	case ids.unnamed == "":
		return out, pages, nil
	case !ids.named:
		return nil, pages, backoff.Permanent(fmt.Errorf("httpsource: list %s: %s", redact(target), ids.unnamed))
	}
	if ids.running != "" && !s.toldUnnamed.Swap(true) {
		s.cfg.logger.Warn("httpsource: the server lists a running sandbox without an ID; no request can pause it, and it is counted failed",
			"list", redact(target), "element", ids.running)
	}
	return out, pages, nil
}

// parse extracts the running sandboxes from one list answer, page
// number page of its listing, recording in ids what their IDs were.
func (s *Source) parse(body []byte, page int, ids *listingIDs) ([]item, error) {
	raw := json.RawMessage(body)
	if s.cfg.itemsField != "" {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(body, &obj); err != nil {
			return nil, fmt.Errorf("want an object with field %q: %w", s.cfg.itemsField, err)
		}
		var ok bool
		if raw, ok = obj[s.cfg.itemsField]; !ok {
			return nil, fmt.Errorf("field %q missing", s.cfg.itemsField)
		}
	}
	var elems []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, fmt.Errorf("want an array of objects: %w", err)
	}
	items := make([]item, 0, len(elems))
	for i, it := range elems {
		id, err := scalar(it[s.cfg.idField])
		if err != nil {
			id = ""
		}
		running := s.needsPreserving(it)
		if id != "" {
			ids.named = true
		} else if ids.unnamed == "" || running && ids.running == "" {
			d := fmt.Sprintf("element %d of page %d: field %q must be a non-empty string or number (fields: %s)",
				i, page, s.cfg.idField, fieldNames(it))
			ids.unnamed = cmp.Or(ids.unnamed, d)
			if running {
				ids.running = d
			}
		}
		if running {
			items = append(items, item{id: id, size: s.size(it), state: s.listedState(it)})
		}
	}
	return items, nil
}

// cutShort reports whether err, parse's error for body, says body is the
// start of a JSON document that ended before the document did: an answer
// cut (its connection closed mid-body, a body the close delimits, with no
// Content-Length nor chunks to tell), transient, not one of another shape,
// which is permanent. Read as permanent, one cut listing ended a
// Preserver's listings, its Report Unknown and no sandbox preserved
// (docs/faults.md row 2164). An empty body is no start of anything: a
// path that answers 200 with none is not a listing, unless the close
// delimits it (see answer.closeDelimited, which pages looks at).
func cutShort(body []byte, err error) bool {
	var se *json.SyntaxError
	return len(bytes.TrimSpace(body)) > 0 && errors.As(err, &se) && se.Offset == int64(len(body)) &&
		strings.HasSuffix(se.Error(), "unexpected end of JSON input")
}

// size reads an element's size field in bytes: positive, or 0 (unknown).
func (s *Source) size(it map[string]json.RawMessage) int64 {
	if s.cfg.sizeField == "" {
		return 0
	}
	v, err := scalar(it[s.cfg.sizeField])
	if err != nil {
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) {
		return 0
	}
	if b := f * float64(s.cfg.sizeUnit); b < math.MaxInt64 {
		return int64(b)
	}
	return math.MaxInt64
}

// fieldNames lists an element's fields, sorted, for an error that shows
// what the server sends instead.
func fieldNames(it map[string]json.RawMessage) string {
	names := slices.Sorted(maps.Keys(it))
	return strings.Join(names, ", ")
}

// needsPreserving reports whether an element is in a running state. An
// element without the state field (or with null, or a value that is not a
// string or number) counts as running: pausing it needlessly costs a
// request, missing it costs the sandbox.
func (s *Source) needsPreserving(it map[string]json.RawMessage) bool {
	if s.cfg.stateField == "" {
		return true
	}
	v, ok := it[s.cfg.stateField]
	if !ok {
		return true
	}
	state, err := scalar(v)
	if err != nil {
		return true
	}
	for _, r := range s.cfg.running {
		if strings.EqualFold(state, r) {
			return true
		}
	}
	return false
}

// scalar reads a JSON string or number as a string. A missing field and
// null are errors: neither is a value.
func scalar(v json.RawMessage) (string, error) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || string(v) == "null" {
		return "", errors.New("missing")
	}
	if v[0] == '"' {
		var s string
		err := json.Unmarshal(v, &s)
		return s, err
	}
	var n json.Number
	if err := json.Unmarshal(v, &n); err != nil {
		return "", err
	}
	return n.String(), nil
}

func snippet(b []byte) string {
	const n = 200
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

// withTimeout bounds ctx by the timeout d of op's requests, the Config
// field that sets it, none when d <= 0. A request it ends says
// so (endedBy): "context deadline exceeded" alone did not tell an
// operator whether the drain's deadline or the timeout, which a slow
// server's listing outgrows, cut it.
func withTimeout(ctx context.Context, d time.Duration, op, field string) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, d, &timeoutCause{op: op, field: field, d: d})
}

// A timeoutCause is the cause of a context a timeout of the Source's
// ended. It wraps context.DeadlineExceeded, as the deadline it is.
type timeoutCause struct {
	op, field string
	d         time.Duration
}

func (c *timeoutCause) Error() string {
	return fmt.Sprintf("the %s timeout (%s, %v) ended it", c.op, c.field, c.d)
}
func (c *timeoutCause) Unwrap() error { return context.DeadlineExceeded }

// endedBy says what ended ctx, for a request it cut: a timeout of the
// Source's, its context, or its context with the cause it was given (a
// drain's Force: "drain: forced").
func endedBy(ctx context.Context) string {
	cause := context.Cause(ctx)
	var tc *timeoutCause
	switch {
	case errors.As(cause, &tc):
		return tc.Error()
	case cause != nil && cause != ctx.Err():
		return fmt.Sprintf("its context ended (%v)", cause)
	}
	return "its context ended"
}

// Telemetry names, in the OpenTelemetry semantic-convention style: the
// drainkit.httpsource prefix, units in the instrument, and the HTTP
// conventions' own attributes where they apply.
const (
	metricRequestDuration = "drainkit.httpsource.request.duration"
	attrOperation         = "drainkit.httpsource.operation"
	attrSandboxes         = "drainkit.httpsource.sandboxes" // listed as running
	attrPages             = "drainkit.httpsource.pages"
	attrSandbox           = "drainkit.pause.sandbox" // the ID, as the pause package names it
)

func spanError(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
