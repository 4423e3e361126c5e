// Package learned keeps what a sandbox server learned about its own
// shutdown across restarts: the estimate of one preserve, the concurrency,
// and the budget and step reserves its plan is made of, in
// STATE_DIR/learned-rates.json. The server writes it after every
// shutdown and starts its Estimator from it; drainkit plan reads it to
// predict the next drain with the same deadline.Plan rule:
//
//	// at shutdown
//	r := learned.Rates{Written: time.Now(), Limit: limit, Grace: grace, Margin: margin,
//		Steps: learned.StepsOf(step.Phase())}
//	r.FromEstimator(estimator)
//	err := r.Write(filepath.Join(stateDir, learned.File))
//
//	// at start
//	prior := configured
//	if r, err := learned.Read(filepath.Join(stateDir, learned.File)); err == nil && r.Estimate > 0 {
//		prior = r.Estimate
//	}
//	estimator := deadline.NewEstimator(prior)
package learned
