package drain

import (
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
)

// Every grace NewServer's refusal names (row 3002, internal/gracefit's
// bisection) is accepted, and a second less is refused, over a grid of
// the edges: graces of 1 to 5 s, 10 s and 30 s (the kubelet's 2 s after
// SIGTERM, the wait run on), preStop sleeps of none to 3 s, margins the
// default, 300 ms and 1 s, and estimates of one preserve from 100 ms to
// 4 s past the grace. A refusal that names no grace is only one a budget
// cannot be built for (a margin not below the grace).
func TestNewServerAcceptsEveryGraceItsRefusalNames(t *testing.T) {
	least := regexp.MustCompile(`raise the grace period to (\d+)s, the smallest that fits`)
	logToDefault(t)
	newServer := func(grace int) error {
		t.Setenv(EnvGrace, strconv.Itoa(grace))
		s, err := NewServer(&http.Server{Addr: "127.0.0.1:0"}, fakesandbox.NewNode())
		if err == nil {
			s.releaseTerm() // never Run: SIGTERM's default action again
		}
		return err
	}
	refusals := 0
	for _, grace := range []int{1, 2, 3, 4, 5, 10, 30} {
		for sleep := 0; sleep <= min(grace, 3); sleep++ {
			for _, margin := range []string{"", "300ms", "1s"} {
				if margin == "1s" && grace == 1 {
					continue // no budget: the margin must be below the grace
				}
				t.Setenv(EnvPreStopSleep, map[bool]string{true: strconv.Itoa(sleep), false: ""}[sleep > 0])
				t.Setenv(EnvMargin, margin)
				for est := 100 * time.Millisecond; est < time.Duration(grace+4)*time.Second; est += time.Duration(grace) * 150 * time.Millisecond {
					t.Setenv(EnvPreserveEstimate, est.String())
					where := "grace " + strconv.Itoa(grace) + ", sleep " + strconv.Itoa(sleep) + ", margin " + margin + ", estimate " + est.String()
					refused := newServer(grace)
					if refused == nil {
						continue
					}
					refusals++
					m := least.FindStringSubmatch(refused.Error())
					require.NotNil(t, m, "%s: %v", where, refused)
					named, err := strconv.Atoi(m[1])
					require.NoError(t, err)
					assert.Greater(t, named, grace, where)
					assert.NoError(t, newServer(named), "%s: the grace named, %ds", where, named)
					assert.Error(t, newServer(named-1), "%s: a second less than the grace named, %ds", where, named)
				}
			}
		}
	}
	assert.Greater(t, refusals, 500)
}
