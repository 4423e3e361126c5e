// Package logonce keeps the books of a failure that repeats, so that it is
// logged once and not at every try: a Lister polled every second for an
// hour, a key file read before every request, a readiness probe the
// kubelet sends every few seconds. Each would otherwise log the same
// failure thousands of times, or, logged only the first time, never say
// that a different failure followed or that it ended.
//
//	var listing logonce.Failures
//	...
//	if err != nil {
//		if news, n := listing.Fail(err.Error()); news {
//			log.Warn("listing failed", "err", err, "failures", n)
//		}
//	} else if n := listing.OK(); n > 0 {
//		log.Info("listing works again", "failures", n)
//	}
//
// A Failures decides and counts; the caller logs, with its own message,
// level and attributes, what Fail and OK tell it is news.
package logonce
