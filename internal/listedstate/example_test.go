package listedstate_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/drainkit/drainkit/internal/listedstate"
	"github.com/drainkit/drainkit/pause/httpsource"
)

// The supervisor's final sweep in front of AgentENV: one listing of every
// sandbox, and the state it gave each, to tell the ones shown paused (being
// paused, snapshotted or forked) from the running ones.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `[{"id":"a","state":"running"},{"id":"b","state":"Paused"},{"id":"c"}]`)
	}))
	defer srv.Close()
	allSource, err := httpsource.New(srv.URL, httpsource.Config{NoStateField: true})
	if err != nil {
		panic(err)
	}
	all, err := allSource.List(context.Background())
	if err != nil {
		panic(err)
	}
	for _, sb := range all {
		state, ok := listedstate.Of(sb)
		shown := !ok || strings.EqualFold(state, "paused")
		fmt.Printf("%s: state %q (%v), shown paused %v\n", sb.ID(), state, ok, shown)
	}
	// Output:
	// a: state "running" (true), shown paused false
	// b: state "Paused" (true), shown paused true
	// c: state "" (false), shown paused true
}
