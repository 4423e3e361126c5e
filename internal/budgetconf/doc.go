// Package budgetconf lets drain read the configuration a deadline.Budget
// was built with (deadline.Config's Margin and PreStopSleep) without an
// exported name in deadline: drain.New lays out the same work in a budget
// of the kubelet's own grace (internal/gracefit.NodeShortfall), which
// needs the margin as configured, not the one in effect for the pod's
// grace (a default margin follows the grace). Package deadline installs Of
// when it is initialised, as it installs prestopsleep.Of; a server never
// uses it.
//
//	margin, sleep := budgetconf.Of(budget) // margin 0: the default for the grace
//
// A budget of any other type than *deadline.Budget panics; a program that
// does not link deadline panics saying so.
package budgetconf
