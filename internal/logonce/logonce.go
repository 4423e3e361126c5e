package logonce

import "sync"

// Failures is the account of a failure that repeats: which one was last
// news, and how many failed since the last success. The zero value has
// seen none. A Failures is safe for concurrent use.
type Failures struct {
	mu   sync.Mutex
	last string // the failure last news
	n    int    // failures since the last success
}

// Fail records a failure, told apart from others by what (an error's
// text, a status code). It reports whether the failure is news, that is
// the first since the last success or other than the last one that was
// news, and n, the failures since the last success, this one included.
// A repeat of the failure last news is not news, however often it comes.
func (f *Failures) Fail(what string) (news bool, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if f.n == 1 || what != f.last {
		f.last = what
		return true, f.n
	}
	return false, f.n
}

// OK records a success and returns the failures since the last one: 0
// when there were none, so that a caller logs the end of a failure once,
// on the first success after it. The next failure is news again.
func (f *Failures) OK() (n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, f.n, f.last = f.n, 0, ""
	return n
}
