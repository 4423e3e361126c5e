package httpsource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/cenkalti/backoff/v4"

	"github.com/drainkit/drainkit/pause"
)

// scope is the instrumentation scope name: the package import path.
const scope = "github.com/drainkit/drainkit/pause/httpsource"

// The defaults: AgentENV's API shape.
const (
	DefaultListPath     = "/sandboxes"
	DefaultPauseMethod  = http.MethodPost
	DefaultPausePath    = "/sandboxes/{id}/pause"
	DefaultIDField      = "id"
	DefaultStateField   = "state"
	DefaultRunningState = "running"
	DefaultAPIKeyHeader = "X-API-Key"
	// DefaultListTimeout bounds one list request. A list is cheap; one that
	// takes longer than this is stuck and the next pass or poll retries it.
	DefaultListTimeout = 10 * time.Second
)

// maxBody bounds how much of a response body is read.
const maxBody = 32 << 20

// config is what the options set.
type config struct {
	client       *http.Client
	apiHeader    string
	apiKey       string
	listPath     string
	pauseMethod  string
	pausePath    string
	itemsField   string
	idField      string
	stateField   string
	running      []string
	gone         []int
	listTimeout  time.Duration
	pauseTimeout time.Duration
	maxInFlight  int
	logger       *slog.Logger
	tp           trace.TracerProvider
	mp           metric.MeterProvider
}

// An Option configures a Source.
type Option func(*config)

// WithClient sets the HTTP client. The default is a client of its own with
// no overall timeout (requests are bounded by their contexts).
func WithClient(c *http.Client) Option { return func(cf *config) { cf.client = c } }

// WithAPIKey sends key in the header named header on every request. An empty
// header means DefaultAPIKeyHeader.
func WithAPIKey(header, key string) Option {
	return func(c *config) {
		if header == "" {
			header = DefaultAPIKeyHeader
		}
		c.apiHeader, c.apiKey = header, key
	}
}

// WithListPath sets the path, relative to the base URL, that lists the
// sandboxes with GET. Default DefaultListPath.
func WithListPath(path string) Option { return func(c *config) { c.listPath = path } }

// WithPause sets the method and the path template that pause one sandbox;
// "{id}" in the template is replaced by the path-escaped sandbox ID.
// Default POST DefaultPausePath.
func WithPause(method, pathTemplate string) Option {
	return func(c *config) { c.pauseMethod, c.pausePath = method, pathTemplate }
}

// WithFields names the JSON fields of the list response. items is the field
// of a top-level object that holds the array ("" when the response is the
// array itself, the default); id and state are the fields of each element.
// An empty state means every listed sandbox needs preserving (for list
// endpoints that return only running ones).
func WithFields(items, id, state string) Option {
	return func(c *config) { c.itemsField, c.idField, c.stateField = items, id, state }
}

// WithRunningStates sets the state values (compared case-insensitively) of
// the sandboxes that need preserving. Default DefaultRunningState.
func WithRunningStates(states ...string) Option {
	return func(c *config) { c.running = states }
}

// WithGoneStatus sets the HTTP statuses of a pause answer that mean the
// sandbox is gone or already preserved (pause.ErrGone). Default 404 and 410.
// A 409 not listed here is settled by listing again (see Source).
func WithGoneStatus(codes ...int) Option { return func(c *config) { c.gone = codes } }

// WithListTimeout bounds each list request (and always the caller's
// context). Default DefaultListTimeout; zero means the context alone.
func WithListTimeout(d time.Duration) Option { return func(c *config) { c.listTimeout = d } }

// WithPauseTimeout bounds each pause request, counted from when it is sent.
// The default, zero, leaves the bound to the caller's context (the
// Preserver's per-sandbox bound and phase deadline): a pause the client gives
// up on keeps running on the server, so a short timeout turns a slow pause
// into a failed one without saving any time.
func WithPauseTimeout(d time.Duration) Option { return func(c *config) { c.pauseTimeout = d } }

// WithMaxInFlight caps how many pause requests are on the wire at once,
// whatever the Preserver's limit; zero (the default) means no cap of the
// Source's own. The Source lowers its limit below the cap when the server
// answers 429 (see Source).
func WithMaxInFlight(n int) Option { return func(c *config) { c.maxInFlight = n } }

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithTracerProvider sets the tracer provider. Default: otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithMeterProvider sets the meter provider. Default: otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// A Source lists the sandboxes of a sandbox server that need preserving and
// preserves them through the server's own HTTP API. It is a pause.Lister;
// the sandboxes it lists are pause.Sandboxes whose Preserve sends the pause
// request.
//
// Error classes, as the Preserver expects them: a gone status (404, 410)
// wraps pause.ErrGone; 408, 429, 5xx and connection errors are transient;
// any other 4xx is wrapped in backoff.Permanent. A 409 Conflict (AgentENV's
// answer for a sandbox that is not running) is settled by listing again:
// no longer listed running means pause.ErrGone (already paused or gone),
// still listed running means transient (a state the server will not pause
// yet). errors.As finds the *StatusError in each.
//
// Overload: when the server answers 429 (or 503 with Retry-After) while other
// pause requests of this Source were on the wire, the Source lowers the
// number it sends at once to what the server handled and queues the request
// for the next free slot, first come first served; the server then stays as
// busy as with one request at a time, and no worse. When nothing else was on
// the wire, Retry-After is waited if it ends before the context's deadline;
// otherwise Preserve returns the transient error at once, and a retry of the
// same sandbox before the Retry-After time waits for it or fails at once.
//
// A Source is safe for concurrent use.
type Source struct {
	cfg     config
	base    *url.URL
	listURL string // base + list path, resolved once
	lim     *limiter
	tracer  trace.Tracer
	reqs    metric.Int64Counter
	latency metric.Float64Histogram

	mu        sync.Mutex
	notBefore map[string]time.Time // per sandbox, from Retry-After
}

// New returns a Source for the server whose API is at baseURL (for example
// "http://127.0.0.1:8080"). It fails, naming the field, when baseURL is not
// an absolute http(s) URL, a path does not start with "/", the pause path
// has no "{id}", the id field is empty, no running state is given while a
// state field is, or a timeout or the in-flight cap is negative.
func New(baseURL string, opts ...Option) (*Source, error) {
	cfg := config{
		listPath:    DefaultListPath,
		pauseMethod: DefaultPauseMethod,
		pausePath:   DefaultPausePath,
		idField:     DefaultIDField,
		stateField:  DefaultStateField,
		running:     []string{DefaultRunningState},
		gone:        []int{http.StatusNotFound, http.StatusGone},
		listTimeout: DefaultListTimeout,
	}
	for _, o := range opts {
		o(&cfg)
	}
	base, err := validate(baseURL, &cfg)
	if err != nil {
		return nil, err
	}
	if cfg.client == nil {
		cfg.client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
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
	s := &Source{cfg: cfg, base: base, lim: newLimiter(cfg.maxInFlight), notBefore: map[string]time.Time{}}
	s.listURL = s.resolve(cfg.listPath)
	s.tracer = cfg.tp.Tracer(scope)
	meter := cfg.mp.Meter(scope)
	if s.reqs, err = meter.Int64Counter("drainkit.httpsource.requests",
		metric.WithDescription("HTTP requests to the sandbox server, by operation and status")); err != nil {
		return nil, fmt.Errorf("httpsource: meter: %w", err)
	}
	if s.latency, err = meter.Float64Histogram("drainkit.httpsource.request.duration",
		metric.WithUnit("s"), metric.WithDescription("HTTP request duration")); err != nil {
		return nil, fmt.Errorf("httpsource: meter: %w", err)
	}
	return s, nil
}

func validate(baseURL string, c *config) (*url.URL, error) {
	base, err := url.Parse(baseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" ||
		base.RawQuery != "" || base.Fragment != "" {
		return nil, fmt.Errorf("httpsource: baseURL must be an absolute http(s) URL without query, got %q", baseURL)
	}
	switch {
	case !strings.HasPrefix(c.listPath, "/"):
		return nil, fmt.Errorf("httpsource: list path must start with \"/\", got %q", c.listPath)
	case !strings.HasPrefix(c.pausePath, "/") || !strings.Contains(c.pausePath, "{id}"):
		return nil, fmt.Errorf("httpsource: pause path must start with \"/\" and contain \"{id}\", got %q", c.pausePath)
	case c.pauseMethod == "":
		return nil, fmt.Errorf("httpsource: pause method must not be empty")
	case c.idField == "":
		return nil, fmt.Errorf("httpsource: id field must not be empty")
	case c.stateField != "" && len(c.running) == 0:
		return nil, fmt.Errorf("httpsource: running states must not be empty when the state field is %q", c.stateField)
	case c.listTimeout < 0:
		return nil, fmt.Errorf("httpsource: list timeout must not be negative, got %v", c.listTimeout)
	case c.pauseTimeout < 0:
		return nil, fmt.Errorf("httpsource: pause timeout must not be negative, got %v", c.pauseTimeout)
	case c.maxInFlight < 0:
		return nil, fmt.Errorf("httpsource: max in flight must not be negative, got %d", c.maxInFlight)
	}
	for _, g := range c.gone {
		if g < 400 || g > 499 {
			return nil, fmt.Errorf("httpsource: gone status must be a 4xx code, got %d", g)
		}
	}
	return base, nil
}

// List returns the sandboxes the server reports in a running state, in the
// order the server lists them. It implements pause.Lister. It returns by
// ctx's deadline and the list timeout; its errors are classified as
// described on Source.
func (s *Source) List(ctx context.Context) ([]pause.Sandbox, error) {
	ids, err := s.RunningIDs(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]pause.Sandbox, len(ids))
	for i, id := range ids {
		out[i] = s.Sandbox(id)
	}
	return out, nil
}

// RunningIDs returns the IDs of the sandboxes the server reports in a
// running state: what a preStop wait polls. Same bounds and errors as List.
func (s *Source) RunningIDs(ctx context.Context) ([]string, error) {
	ctx, span := s.tracer.Start(ctx, "httpsource.List")
	defer span.End()
	ctx, cancel := withTimeout(ctx, s.cfg.listTimeout)
	defer cancel()
	body, err := s.do(ctx, "list", http.MethodGet, s.listURL)
	if se := (*StatusError)(nil); errors.As(err, &se) {
		err = classify(se, nil) // a 404 here is a wrong path, not a gone sandbox
	}
	if err != nil {
		spanError(span, err)
		return nil, err
	}
	ids, err := s.parse(body)
	if err != nil {
		err = backoff.Permanent(fmt.Errorf("httpsource: list %s: %w", s.listURL, err))
		spanError(span, err)
		return nil, err
	}
	span.SetAttributes(attribute.Int("sandboxes.running", len(ids)))
	return ids, nil
}

// Sandbox returns the sandbox with the given ID on this server, whether or
// not it is listed.
func (s *Source) Sandbox(id string) pause.Sandbox { return &sandbox{src: s, id: id} }

// Limit returns how many pause requests the Source currently sends at once;
// a very large number until the server answered 429 or WithMaxInFlight set
// a cap.
func (s *Source) Limit() int { return s.lim.current() }

func (s *Source) resolve(path string) string {
	return strings.TrimSuffix(s.base.String(), "/") + path
}

// do sends one request and returns the body of a 2xx answer, or a
// classified error.
func (s *Source) do(ctx context.Context, op, method, target string) ([]byte, error) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return nil, backoff.Permanent(fmt.Errorf("httpsource: %s: %w", op, err))
	}
	req.Header.Set("Accept", "application/json")
	if s.cfg.apiKey != "" {
		req.Header.Set(s.cfg.apiHeader, s.cfg.apiKey)
	}
	resp, err := s.cfg.client.Do(req)
	status := "error"
	defer func() {
		attrs := metric.WithAttributes(attribute.String("op", op), attribute.String("status", status))
		s.reqs.Add(context.WithoutCancel(ctx), 1, attrs)
		s.latency.Record(context.WithoutCancel(ctx), time.Since(start).Seconds(), attrs)
	}()
	if err != nil {
		return nil, fmt.Errorf("httpsource: %s: %w", op, err) // transient: connection, timeout
	}
	defer resp.Body.Close()
	status = fmt.Sprint(resp.StatusCode)
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("httpsource: %s %s: reading body: %w", op, target, err)
	}
	if resp.StatusCode/100 == 2 {
		return body, nil
	}
	return nil, &StatusError{
		Op: op, URL: target, StatusCode: resp.StatusCode,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
		Body:       snippet(body),
	}
}

// parse extracts the running sandboxes' IDs from a list response.
func (s *Source) parse(body []byte) ([]string, error) {
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
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("want an array of objects: %w", err)
	}
	ids := make([]string, 0, len(items))
	for i, it := range items {
		id, err := scalar(it[s.cfg.idField])
		if err != nil || id == "" {
			return nil, fmt.Errorf("element %d: field %q must be a non-empty string or number", i, s.cfg.idField)
		}
		if s.needsPreserving(it) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// needsPreserving reports whether an element is in a running state. An
// element without the state field counts as running: pausing it needlessly
// costs a request, missing it costs the sandbox.
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

// scalar reads a JSON string or number as a string.
func scalar(v json.RawMessage) (string, error) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
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

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

func spanError(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
