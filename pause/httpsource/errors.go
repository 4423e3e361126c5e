package httpsource

import (
	"errors"
	"fmt"
	"math"
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
// nor for a sandbox still listed running, see Source; a 404 from the list
// path is a wrong path, so List reports it permanent), in backoff.Permanent for any other 4xx except 408 and 429, and
// bare (transient) for 408, 429 and 5xx; List's answer to a page after the
// first is transient for any 4xx but 401 and 403 (its page token refused,
// see List). A 409 from Preserve is settled by
// listing again, or retried with Config.RetryConflict, as Source describes;
// a 401 or 403 to the key of Config.APIKeyFile is transient (see
// Config.APIKeyFile). errors.As finds it in every case.
type StatusError struct {
	Op         string // "list" or "pause"
	URL        string // the request URL, its password (base URL's user information) redacted
	StatusCode int    // the HTTP status
	// RetryAfter is the wait the Retry-After header asks for, zero if
	// absent, malformed or past. A wait longer than a Duration holds
	// (about 292 years: past any deadline) is the longest Duration,
	// math.MaxInt64, and Error names the header as the server sent it.
	RetryAfter time.Duration
	Body       string // the start of the response body, for the report

	retryAfter string    // the Retry-After header as sent, for Error
	retryAt    time.Time // when the answer came plus RetryAfter; zero without a Retry-After read
	key        keyUse    // the request's use of Config.APIKeyFile's key (zero without one)
}

// Error implements error.
func (e *StatusError) Error() string {
	msg := fmt.Sprintf("httpsource: %s %s: %d %s", e.Op, e.URL, e.StatusCode, http.StatusText(e.StatusCode))
	switch v := strings.TrimSpace(e.retryAfter); {
	case e.RetryAfter == maxRetryAfter && v != "":
		// Saturated: the server's own words, not the longest Duration.
		if _, err := strconv.ParseUint(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
			v += "s"
		}
		msg += fmt.Sprintf(" (retry after %s)", v)
	case e.RetryAfter > 0:
		msg += fmt.Sprintf(" (retry after %v)", e.RetryAfter)
	case v != "" && e.retryAt.IsZero():
		msg += fmt.Sprintf(" (Retry-After %q ignored: %s)", v, badRetryAfter)
	}
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// Overloaded reports whether the server asked the client to slow down:
// 429, or 503 with a Retry-After header, whatever wait it asks for (0, or
// a date already past on this node's clock, is still the server's word
// that it is overloaded).
func (e *StatusError) Overloaded() bool {
	return e.StatusCode == http.StatusTooManyRequests ||
		(e.StatusCode == http.StatusServiceUnavailable && strings.TrimSpace(e.retryAfter) != "")
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

// maxRetryAfter is the RetryAfter of a wait longer than a Duration holds.
const maxRetryAfter = time.Duration(math.MaxInt64)

// badRetryAfter says why a Retry-After header was ignored.
const badRetryAfter = "neither a number of seconds nor an HTTP date"

// parseRetryAfter reads a Retry-After header: delta-seconds or an HTTP
// date (RFC 9110, section 10.2.3), and reports whether it read one. It
// returns zero when the header is absent, malformed (ok false: a negative
// or fractional number, a word) or in the past, and saturates at
// maxRetryAfter: seconds multiplied into a Duration past its range
// wrapped, to a negative wait read as none or to any wait at all (2^64 ns
// plus 0.29 s is 584 years), and a number past int64 was no number.
func parseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	switch secs, err := strconv.ParseUint(v, 10, 64); { // digits alone: no sign
	case err == nil && secs > uint64(maxRetryAfter/time.Second), errors.Is(err, strconv.ErrRange):
		return maxRetryAfter, true
	case err == nil:
		return time.Duration(secs) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true // Sub saturates
	}
	return 0, false
}

// errNoFit is wrapped when a Retry-After wait would end past the context's
// deadline: the request is not retried early.
var errNoFit = errors.New("retry-after does not fit before the deadline")
