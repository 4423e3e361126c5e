// Package learned keeps what a sandbox server learned about its own
// shutdown across restarts: the estimate of one preserve, the concurrency
// (at the end of the shutdown, and the one its adaptive limit learned
// best), and the budget and step reserves its plan is made of, in
// STATE_DIR/learned-rates.json. The server writes it after every
// shutdown and starts its Estimator and its adaptive limit from it;
// drainkit plan reads it to predict the next drain with the same
// deadline.Plan rule:
//
//	// at shutdown
//	r := learned.Rates{Written: time.Now(), Limit: limit, Grace: grace, Margin: margin,
//		Steps: learned.StepsOf(step.Phase())}
//	r.FromEstimator(estimator)
//	r.FromReport(preserved, last) // the learned limit; the one before when this drain learned none
//	err := r.Write(filepath.Join(stateDir, learned.File))
//
//	// at start
//	prior, cfg := configured, pause.Config{} // the adaptive limit, from 8
//	if last, err := learned.Read(filepath.Join(stateDir, learned.File)); err == nil {
//		if last.Estimate > 0 {
//			prior = last.Estimate
//		}
//		if last.LearnedLimit > 0 { // checked against the estimate by the first epoch
//			cfg.Limit, cfg.MaxLimit = min(last.LearnedLimit, ceiling), ceiling
//		}
//	}
//	cfg.Estimator = deadline.NewEstimator(prior)
//
// A server whose limit adapts writes its ceiling too (MaxLimit): drainkit
// plan then builds the Preserver that server starts (pause.Config{Limit:
// LearnedLimit, MaxLimit: MaxLimit}) and reserves with the limit it
// reports at the start, as the server's live plan does, not with Limit.
//
// A file written before LearnedLimit existed (only limit) still reads: its
// LearnedLimit is zero, and the server starts its limit cold, since the
// limit at the end of a shutdown may be a probe or a start that measured
// nothing; one written before MaxLimit existed is planned as a fixed limit
// at Limit, as it was then.
package learned
