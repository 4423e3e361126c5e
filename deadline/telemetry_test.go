package deadline_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
)

func TestBudgetLogsEveryChangeThatTakesEffect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		b, err := deadline.New(3600*time.Second, deadline.Config{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
		require.NoError(t, err)
		t0 := time.Now()
		b.OnPreStop(t0)
		b.OnPreStop(t0.Add(time.Second))      // ignored: not logged
		b.Tighten(t0.Add(4000 * time.Second)) // later: not logged
		b.Tighten(t0.Add(30 * time.Second))   // logged
		b.OnSIGTERM(t0.Add(30 * time.Second)) // logged: the hook overran the cut grace
		b.OnSIGTERM(t0.Add(31 * time.Second)) // ignored

		type record struct {
			Msg, Event, Anchor string
			T0, Kill, Deadline time.Time
			SIGTERM            *time.Time
		}
		var got []record
		dec := json.NewDecoder(&buf)
		for dec.More() {
			var r record
			require.NoError(t, dec.Decode(&r))
			got = append(got, r)
		}
		require.Len(t, got, 3)
		assert.Equal(t, []string{"preStop", "tighten", "SIGTERM"}, []string{got[0].Event, got[1].Event, got[2].Event})
		assert.Equal(t, "deadline: budget changed", got[0].Msg)
		assert.Equal(t, "preStop", got[2].Anchor)
		assert.True(t, t0.Equal(got[0].T0))
		assert.True(t, t0.Add(3600*time.Second).Equal(got[0].Kill))
		assert.True(t, t0.Add(30*time.Second).Equal(got[1].Kill))
		assert.True(t, t0.Add(32*time.Second).Equal(got[2].Kill))
		assert.True(t, t0.Add(31*time.Second).Equal(got[2].Deadline))
		assert.Nil(t, got[1].SIGTERM)
		require.NotNil(t, got[2].SIGTERM)
		assert.True(t, t0.Add(30*time.Second).Equal(*got[2].SIGTERM))
	})
}
