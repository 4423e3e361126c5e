package httpsource

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The check listings that gone answers share (runningChecks, row 2161),
// as a property over random schedules, under the race detector: callers
// that note the count at random times (a pause sent), wait at random times
// after (its gone answer), some with a deadline, some cancelled (a
// Preserve given up), and listings of random lengths, some failing.
// Whatever the schedule:
//
//   - one listing at a time;
//   - what a caller is given was listed by a listing started after its
//     pause was sent (numbered above the count it noted), never an older
//     one's;
//   - a caller cancelled (under a deadline, as a Preserver's Preserves
//     are) gets its own context's end, and the listing it started goes on
//     for the others (the starter's deadline, not its cancellation);
//   - no more listings than callers that needed one: a listing shared.
func TestCheckListingsAreSharedOneAtATimeAndNeverOlderThanThePause(t *testing.T) {
	for seed := range uint64(200) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { checkSchedule(t, rand.New(rand.NewPCG(seed, 2161))) })
		})
	}
}

// checkSchedule runs one random schedule of callers of a runningChecks.
func checkSchedule(t *testing.T, rnd *rand.Rand) {
	var c runningChecks
	var inFlight, most, listings atomic.Int64
	var mu sync.Mutex
	list := func(ctx context.Context) ([]string, error) {
		n := int(listings.Add(1))
		now := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		mu.Lock()
		fails := rnd.IntN(5) == 0
		length := time.Duration(rnd.IntN(300)) * time.Millisecond
		mu.Unlock()
		select {
		case <-time.After(length):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if fails {
			return nil, errors.New("429")
		}
		return []string{"listing " + strconv.Itoa(n)}, nil
	}

	type call struct {
		sent, wait       time.Duration
		deadline, cancel time.Duration // 0: none
	}
	calls := make([]call, 2+rnd.IntN(30))
	for i := range calls {
		calls[i] = call{sent: time.Duration(rnd.IntN(1000)) * time.Millisecond, wait: time.Duration(rnd.IntN(500)) * time.Millisecond}
		switch rnd.IntN(4) {
		case 0:
			calls[i].deadline = time.Duration(1+rnd.IntN(400)) * time.Millisecond
		case 1: // a Preserve given up: under its phase's deadline, as a Preserver's are
			calls[i].cancel = time.Duration(1+rnd.IntN(400)) * time.Millisecond
			calls[i].deadline = calls[i].cancel + time.Duration(1+rnd.IntN(400))*time.Millisecond
		}
	}
	var wg sync.WaitGroup
	for i, cl := range calls {
		wg.Go(func() {
			time.Sleep(cl.sent)
			sent := c.sending()
			time.Sleep(cl.wait) // the pause is out
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if cl.deadline > 0 {
				ctx, cancel = context.WithTimeout(ctx, cl.deadline)
				defer cancel()
			}
			if cl.cancel > 0 {
				time.AfterFunc(cl.cancel, cancel)
			}
			running, err := c.since(ctx, sent, list)
			if err != nil {
				if ctx.Err() == nil { // the listing's own failure, or its starter's deadline: never another's cancellation
					assert.NotContains(t, err.Error(), "waiting for a listing", "call %d: its context has not ended", i)
					assert.NotErrorIs(t, err, context.Canceled, "call %d: a listing another caller's cancellation cut", i)
				}
				return
			}
			require.Len(t, running, 1, "call %d", i)
			for id := range running {
				n, _ := strconv.Atoi(id[len("listing "):])
				assert.Greater(t, uint64(n), sent, "call %d, sent at count %d, given %s", i, sent, id)
			}
		})
	}
	wg.Wait()
	time.Sleep(time.Second) // a listing goes on past the caller that started it, to its deadline at most
	assert.LessOrEqual(t, most.Load(), int64(1), "one listing at a time")
	assert.LessOrEqual(t, listings.Load(), int64(len(calls)), "%d callers", len(calls))
}
