package pipenet_test

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/drainkit/drainkit/internal/pipenet"
)

// An HTTP server and its client on one Listener: the server serves what Accept
// returns, the client's transport dials with Dial. In a synctest bubble the same
// wiring runs in virtual time.
func Example() {
	l := pipenet.Listen("pipe")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello over a pipe")
	})}
	go srv.Serve(l)
	defer srv.Shutdown(context.Background())

	client := &http.Client{Transport: &http.Transport{DialContext: l.Dial}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://pipe/")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status, string(body))
	// Output: 200 OK hello over a pipe
}
