package main

import (
	"fmt"
	"sort"
)

// count walks a module (here a two-package one under testdata) and gives
// each public package's exported names: package-level ones, and the
// fields and methods a user can name; internal/ counts nothing. main
// prints one line per package and the total, as the README shows.
func Example_count() {
	pkgs, err := count("testdata/tree")
	if err != nil {
		panic(err)
	}
	dirs := make([]string, 0, len(pkgs))
	for dir := range pkgs {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		fmt.Println(dir, pkgs[dir], topLevel(pkgs[dir]))
	}
	// Output:
	// pub [Config Config.Limit New] [Config New]
}
