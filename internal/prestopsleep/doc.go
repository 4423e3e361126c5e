// Package prestopsleep lets drain read the preStop sleep a
// deadline.Budget was declared with (deadline.Config.PreStopSleep) without
// an exported name in deadline: drain.New's refusal of a plan names it and
// what it leaves. Package deadline installs Of when it is initialised, as
// it installs nodeend.Set; a server never uses it.
//
//	sleep := prestopsleep.Of(budget) // 0: no sleep hook declared
//
// A budget of any other type than *deadline.Budget panics, naming the
// type; a program that does not link deadline panics saying so.
package prestopsleep
