package drain

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/logbuf"
)

// An ExecHook whose URL no request can reach (a port past 65535, no
// scheme, no host) is refused at its first call, naming the URL, as a
// wrong path is: asking again cannot change it. Fault: each call failed,
// as a server not answering does, and the hook asked MaxFailures times, a
// RetryInterval apart, before it gave up: 5 calls and 5 Warn lines over
// 4 s of the kubelet's grace by default.
func TestExecHookRefusesAURLNoRequestCanReach(t *testing.T) {
	for raw, want := range map[string]string{
		"http://127.0.0.1:99999/drain": `port 99999 is no TCP port (1-65535)`,
		"http://127.0.0.1:0/drain":     `port 0 is no TCP port (1-65535)`,
		"127.0.0.1:8082/drain":         `want an http:// or https:// URL with a host`,
		"http:///drain":                `want an http:// or https:// URL with a host`,
	} {
		t.Run(raw, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var logs logbuf.Buffer
				start := time.Now()
				sum, err := ExecHook{URL: raw, Logger: slog.New(slog.NewTextHandler(&logs, nil))}.Run(context.Background())
				require.Error(t, err)
				assert.Nil(t, sum)
				assert.ErrorContains(t, err, "refused (a wrong URL, or a secret missing or wrong), not asked again")
				assert.ErrorContains(t, err, want)
				assert.Equal(t, 1, strings.Count(logs.String(), "drainhook: request failed"), "asked once:\n%s", logs.String())
				assert.Zero(t, time.Since(start), "no pause to ask again")
			})
		})
	}
}
