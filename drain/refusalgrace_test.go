package drain

import (
	"net/http"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
)

// NewServer's refusal told an operator to "raise the grace period" and
// not to what: at 3 a.m. the number is what is needed. It now names the
// smallest whole grace that fits the work as configured (the preserve
// estimate, the margin, the preStop sleep, and NewServer's http step,
// whose reserve is a fortieth of the grace), by the rule drainkit plan's
// "smallest grace that fits" follows (internal/gracefit). Put in the
// configuration, that grace is accepted; one second less is refused.
func TestNewServerRefusalNamesTheSmallestGraceThatFits(t *testing.T) {
	least := regexp.MustCompile(`raise the grace period to (\d+)s, the smallest that fits`)
	for _, c := range []struct {
		name                           string
		grace, estimate, sleep, margin string
	}{
		{"a round longer than the grace", "10", "20s", "", ""},
		{"a preStop sleep takes most of it", "30", "20s", "20", ""},
		{"a grace of 1 s, the wait run on", "1", "1200ms", "", ""},
		{"a margin of 300 ms, the http step a fortieth of the grace", "60", "85s", "", "300ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			logToDefault(t)
			t.Setenv(EnvPreserveEstimate, c.estimate)
			if c.sleep != "" {
				t.Setenv(EnvPreStopSleep, c.sleep)
			}
			if c.margin != "" {
				t.Setenv(EnvMargin, c.margin)
			}
			newServer := func(grace int) error {
				t.Setenv(EnvGrace, strconv.Itoa(grace))
				s, err := NewServer(&http.Server{Addr: "127.0.0.1:0"}, fakesandbox.NewNode())
				if err == nil {
					s.releaseTerm() // never Run: SIGTERM's default action again
				}
				return err
			}
			g, err := strconv.Atoi(c.grace)
			require.NoError(t, err)
			refused := newServer(g)
			require.Error(t, refused)
			m := least.FindStringSubmatch(refused.Error())
			require.NotNil(t, m, refused.Error())
			named, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			assert.NoError(t, newServer(named), "the grace the refusal named")
			assert.Error(t, newServer(named-1), "a second less than the grace the refusal named")
		})
	}
}
