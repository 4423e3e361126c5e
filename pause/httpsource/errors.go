package httpsource

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/drainkit/drainkit/pause"
)

// A StatusError is a non-2xx answer from the server. Preserve and List
// return it classified: wrapped in pause.ErrGone for a gone status (Preserve
// only, and not after a 5xx answer to an earlier pause of the same sandbox,
// see Source; a 404 from the list path is a wrong path, so List reports it
// permanent), in backoff.Permanent for any other 4xx except 408 and 429, and
// bare (transient) for 408, 429 and 5xx. A 409 from Preserve is settled by
// listing again, or retried with Config.RetryConflict, as Source describes.
// errors.As finds it in every case.
type StatusError struct {
	Op         string        // "list" or "pause"
	URL        string        // the request URL, its password (base URL's user information) redacted
	StatusCode int           // the HTTP status
	RetryAfter time.Duration // from the Retry-After header, zero if absent
	Body       string        // the start of the response body, for the report
}

// Error implements error.
func (e *StatusError) Error() string {
	msg := fmt.Sprintf("httpsource: %s %s: %d %s", e.Op, e.URL, e.StatusCode, http.StatusText(e.StatusCode))
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %v)", e.RetryAfter)
	}
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// Overloaded reports whether the server asked the client to slow down:
// 429, or 503 with a Retry-After header.
func (e *StatusError) Overloaded() bool {
	return e.StatusCode == http.StatusTooManyRequests ||
		(e.StatusCode == http.StatusServiceUnavailable && e.RetryAfter > 0)
}

// transient reports whether the status is worth retrying.
func transient(code int) bool {
	return code >= 500 || code == http.StatusTooManyRequests || code == http.StatusRequestTimeout
}

// classify wraps a StatusError for the Preserver: gone, permanent or
// transient.
func classify(e *StatusError, gone []int) error {
	for _, g := range gone {
		if e.StatusCode == g {
			return fmt.Errorf("%w: %w", pause.ErrGone, e)
		}
	}
	if transient(e.StatusCode) {
		return e
	}
	return backoff.Permanent(e)
}

// parseRetryAfter reads a Retry-After header: delta-seconds or an HTTP date.
// It returns zero when the header is absent, malformed or in the past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		return max(time.Duration(secs)*time.Second, 0)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// errNoFit is wrapped when a Retry-After wait would end past the context's
// deadline: the request is not retried early.
var errNoFit = errors.New("retry-after does not fit before the deadline")
