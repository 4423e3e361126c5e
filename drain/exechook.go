package drain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/drainkit/drainkit/internal/httpdefault"
)

// The defaults of the zero ExecHook fields.
const (
	defaultHookRequestTimeout = 10 * time.Second
	defaultHookMaxFailures    = 5
	defaultHookRetryInterval  = time.Second
)

// An ExecHook is the client side of an exec preStop hook, for manifests
// that cannot use httpGet: a tiny command (drain/cmd/drainhook) runs it
// inside the container and it calls the server's PreStop handler.
//
// Unlike a shell loop around curl, it is bounded three ways: every request
// has RequestTimeout (the server is asked to answer within it with
// ?wait=), it gives up after MaxFailures consecutive failed requests, or at
// the first refusal (a 4xx but 408 and 429: a wrong path, a secret missing
// or wrong; a 200 that is not a PreStop summary; or a URL no request can
// reach: not http(s), no host, a port outside 1-65535), which asking again
// cannot change, and it never runs past the drain deadline the server
// reported (nor past MaxWait when set). The zero value, with URL set, is
// ready to use.
type ExecHook struct {
	// URL of the PreStop handler, e.g. http://127.0.0.1:8082/drain (drain.Server's
	// default hook address).
	URL string
	// RequestTimeout bounds each request; zero means 10 s.
	RequestTimeout time.Duration
	// MaxFailures is how many consecutive failed requests (no answer, a
	// 5xx, 408 or 429) end the hook; zero means 5. A refusal ends it at once.
	MaxFailures int
	// RetryInterval is the pause after a failed request; zero means 1 s.
	// It ends at the drain deadline the server reported, and Run with it.
	RetryInterval time.Duration
	// MaxWait, when positive, bounds the whole hook.
	MaxWait time.Duration
	// Start is when the kubelet started the hook (T0), sent to the server
	// so that the hook's own start-up does not count as drain time: use
	// ProcessStart(). Zero means the time Run starts. Every request sends
	// the same start: it is how the server tells this run's polls from a
	// kubelet running the hook again (a poll without one is taken for one
	// of the run under way, and a run of the hook again is not seen).
	Start time.Time
	// Secret, when set, is sent in the X-Drain-Secret header, where a
	// HookGuard with the same Secret (and the default Header) looks for it;
	// white space at either end (a Secret file's last newline) is not
	// sent, as HookGuard does not count it.
	Secret string
	// Client makes the requests; nil means a new http.Client that never
	// uses a proxy: the hook speaks to its own pod, as the kubelet's
	// httpGet hook does, whatever HTTP_PROXY the container has. Its
	// transport is a copy of http.DefaultTransport, or, when a program put
	// another RoundTripper there, one with net/http's default settings,
	// which the hook's calls then do not go through.
	Client *http.Client
	// Logger receives one line per failure and one at the end; nil discards.
	Logger *slog.Logger
}

// Run calls the PreStop handler until it reports the drain wait over, the
// drain deadline it reported passes, MaxFailures consecutive requests
// failed, MaxWait passed, or ctx ends. It returns the last summary the
// server sent (nil if none) and why it stopped early (nil when the server
// said the wait is over). No exit status of a hook command holds the pod
// (the kubelet goes on to SIGTERM whatever it returns); drainhook exits 1
// when Run returns an error and no summary, so that the kubelet records a
// FailedPreStopHook event and logs the hook's output (at -v=1), and 0
// otherwise.
func (h ExecHook) Run(ctx context.Context) (*PreStopSummary, error) {
	h.defaults()
	if h.Start.IsZero() { // one run: every poll names it
		h.Start = time.Now()
	}
	if h.MaxWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.MaxWait)
		defer cancel()
	}
	var last *PreStopSummary
	var drainDL time.Time // the drain deadline the server reported: never run past it
	for failures := 0; ; {
		sum, err := h.call(ctx, drainDL)
		if err == nil {
			failures, last = 0, sum
			if sum.Done {
				h.Logger.Info("drainhook: drain wait over", "reason", sum.Reason, "running", sum.Running)
				return last, nil
			}
			drainDL = sum.DrainDeadline
		} else {
			failures++
			h.Logger.Warn("drainhook: request failed", "err", err, "failures", failures)
		}
		var refused refusedError
		switch {
		case errors.As(err, &refused):
			return last, fmt.Errorf("drainhook: refused (a wrong URL, or a secret missing or wrong), not asked again: %w", err)
		case ctx.Err() != nil:
			return last, fmt.Errorf("drainhook: stopped: %w", context.Cause(ctx))
		case passed(drainDL):
			return last, deadlinePassed(drainDL)
		case failures >= h.MaxFailures && failures == 1:
			return last, fmt.Errorf("drainhook: the request failed: %w", err)
		case failures >= h.MaxFailures:
			return last, fmt.Errorf("drainhook: %d consecutive failures, last: %w", failures, err)
		}
		if err != nil {
			// The pause ends at the drain deadline: past it, the hook
			// only holds the kubelet's SIGTERM, and the preserve phase,
			// which starts there, loses that time.
			pause := h.RetryInterval
			if !drainDL.IsZero() {
				pause = min(pause, time.Until(drainDL))
			}
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			if passed(drainDL) {
				return last, deadlinePassed(drainDL)
			}
		}
	}
}

// passed reports whether the drain deadline dl, when the server reported
// one, has come.
func passed(dl time.Time) bool { return !dl.IsZero() && !time.Now().Before(dl) }

// deadlinePassed is Run's error when it stopped at the drain deadline dl.
func deadlinePassed(dl time.Time) error {
	return fmt.Errorf("drainhook: the drain deadline %s passed", dl.Format(time.RFC3339Nano))
}

// noProxy returns a new http.Transport with the settings of
// http.DefaultTransport but no proxy: Go's default transport sends every
// request to an address other than loopback through the container's
// HTTP_PROXY, which the kubelet's own hooks never use; a proxy's 403 then
// ended the hook as a refusal, and the secret went to the proxy. When a
// program put another RoundTripper in http.DefaultTransport (a wrapper
// such as otelhttp's, a recorder), the settings are the ones net/http
// gives it: a wrapper, which may send the call anywhere, is no transport
// to clone, and asserted unchecked it panicked Run (docs/faults.md row
// 2800). A program whose calls must go through it sets ExecHook.Client.
func noProxy() *http.Transport {
	tr := httpdefault.Transport()
	tr.Proxy = nil
	return tr
}

func (h *ExecHook) defaults() {
	if h.RequestTimeout <= 0 {
		h.RequestTimeout = defaultHookRequestTimeout
	}
	if h.MaxFailures <= 0 {
		h.MaxFailures = defaultHookMaxFailures
	}
	if h.RetryInterval <= 0 {
		h.RetryInterval = defaultHookRetryInterval
	}
	if h.Client == nil {
		h.Client = &http.Client{Transport: noProxy()}
	}
	if h.Logger == nil {
		h.Logger = slog.New(slog.DiscardHandler)
	}
}

// call makes one request, bounded by the request timeout and drainDL (when
// set), asking the server to answer within 90% of the request timeout and
// of the time left before drainDL: the server's deadline moves later as
// its sandboxes end, and an answer before drainDL tells the hook the new
// one, where a request cut at drainDL ended the hook while the server's
// wait went on, and the kubelet's SIGTERM cut it short.
func (h *ExecHook) call(ctx context.Context, drainDL time.Time) (*PreStopSummary, error) {
	wait := nineTenths(h.RequestTimeout)
	if !drainDL.IsZero() {
		wait = max(0, min(wait, nineTenths(time.Until(drainDL))))
	}
	ctx, cancel := context.WithTimeout(ctx, h.RequestTimeout)
	defer cancel()
	if !drainDL.IsZero() {
		var cancelDL context.CancelFunc
		ctx, cancelDL = context.WithDeadline(ctx, drainDL)
		defer cancelDL()
	}
	u, err := parseHookURL(h.URL)
	if err != nil {
		return nil, refusedError{err} // asking again cannot change it
	}
	q := u.Query()
	q.Set("wait", wait.String())
	if !h.Start.IsZero() {
		q.Set("start", h.Start.Format(time.RFC3339Nano))
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if secret := strings.TrimSpace(h.Secret); secret != "" {
		req.Header.Set(defaultHookHeader, secret)
	}
	resp, err := h.Client.Do(req)
	if ue, ok := err.(*url.Error); ok { // every error of Do's: its Err is the Transport's, a user's, which Run unwraps
		ue.Err = readableErr(ue.Err, "ExecHook.Client's Transport", "a failed request")
	}
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("%s: %s", u.Redacted(), resp.Status)
		if why := answerText(resp.Body); why != "" {
			// The server's own words: a HookGuard's 403 names what is
			// wrong ("no X-Drain-Secret header", "wrong X-Drain-Secret",
			// "the pod is not terminating"), which the status alone
			// leaves the operator to guess.
			err = fmt.Errorf("%s: %s: %s", u.Redacted(), resp.Status, why)
		}
		if c := resp.StatusCode; c >= 400 && c < 500 && c != http.StatusRequestTimeout && c != http.StatusTooManyRequests {
			err = refusedError{err} // asked again, the server answers the same
		}
		return nil, err
	}
	var sum PreStopSummary
	if err := json.NewDecoder(resp.Body).Decode(&sum); err != nil {
		return nil, fmt.Errorf("%s: decoding the summary: %w", u.Redacted(), err)
	}
	// Every PreStop answer has a reason, and one not over the drain
	// deadline too. Another handler's JSON object (with a "reason" of its
	// own, or none) decodes as a wait not over with no deadline: asked
	// again at once, without a pause, until the kubelet's grace ran out,
	// and the drain never started.
	switch {
	case sum.Reason == "":
		return nil, refusedError{fmt.Errorf("%s: the answer is not a drain.PreStop summary (no reason): the URL names another handler", u.Redacted())}
	case !sum.Done && sum.DrainDeadline.IsZero():
		return nil, refusedError{fmt.Errorf("%s: the answer is not a drain.PreStop summary (a wait not over with no drain deadline): the URL names another handler", u.Redacted())}
	}
	return &sum, nil
}

// nineTenths is 90 % of d, rounded up to the nanosecond. Not d * 9 / 10,
// which wraps round past the largest Duration: a drain deadline 32.5 to
// 65 years away (a manifest's "never") asked for ?wait= below zero, so
// 0s, and every poll came back at once.
func nineTenths(d time.Duration) time.Duration { return d - d/10 }

// answerText is the start of an answer's body, on one line: at most
// maxAnswerText bytes, white space runs made one space, control
// characters and invalid UTF-8 quoted away.
func answerText(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, maxAnswerText))
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(b), "\uFFFD")), " ")
	if q := strconv.Quote(s); q[1:len(q)-1] != s {
		return q
	}
	return s
}

// maxAnswerText is how much of a refusal's body answerText keeps.
const maxAnswerText = 200

// refusedError is a request the server refused (a 4xx but 408 and 429):
// asking again cannot change the answer, and every retry spends the grace
// period the kubelet gives the hook.
type refusedError struct{ error }

// parseHookURL parses an ExecHook's URL, refusing one no request can
// reach: not http(s), no host, a port no dial can use (url.Parse takes
// any digits, and "127.0.0.1:8082/drain" is a path). Each request failed
// as a server not answering does, and the hook asked MaxFailures times.
func parseHookURL(raw string) (*url.URL, error) {
	const want = "want an http:// or https:// URL with a host, such as http://127.0.0.1:8082/drain"
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("URL %q: %s (%w)", raw, want, errors.Unwrap(err)) // url.Error repeats the URL
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("URL %q: %s", raw, want)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("URL %q: port %s is no TCP port (1-65535)", raw, p)
		}
	}
	return u, nil
}

func (e refusedError) Unwrap() error { return e.error }
