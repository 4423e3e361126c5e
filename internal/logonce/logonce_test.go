package logonce

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFailureIsNewsOnceUntilAnotherOrASuccess(t *testing.T) {
	var f Failures
	assert.Zero(t, f.OK(), "no failure: nothing to say")
	news, n := f.Fail("a")
	assert.True(t, news, "the first")
	assert.Equal(t, 1, n)
	news, n = f.Fail("a")
	assert.False(t, news, "a repeat")
	assert.Equal(t, 2, n)
	news, n = f.Fail("b")
	assert.True(t, news, "another failure")
	assert.Equal(t, 3, n)
	news, _ = f.Fail("a")
	assert.True(t, news, "the first again, after another")
	assert.Equal(t, 4, f.OK(), "the failures it ends")
	assert.Zero(t, f.OK(), "said once")
	news, n = f.Fail("a")
	assert.True(t, news, "the same failure after a success is news")
	assert.Equal(t, 1, n)
}

// An empty text is a failure like any other: the first one is news.
func TestEmptyFailureIsNewsTheFirstTime(t *testing.T) {
	var f Failures
	news, _ := f.Fail("")
	assert.True(t, news)
	news, _ = f.Fail("")
	assert.False(t, news)
}

// Callers at once (the kubelet's probes): one is told the failure is
// news, one that it ended; under -race.
func TestConcurrentCallersAreToldOnce(t *testing.T) {
	var f Failures
	var mu sync.Mutex
	var news, ended int
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if ok, _ := f.Fail("401"); ok {
				mu.Lock()
				news++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for range 16 {
		wg.Go(func() {
			if f.OK() > 0 {
				mu.Lock()
				ended++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 1, news)
	assert.Equal(t, 1, ended)
}
