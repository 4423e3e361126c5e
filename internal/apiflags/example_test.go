package apiflags_test

import (
	"flag"
	"fmt"

	"github.com/drainkit/drainkit/internal/apiflags"
	"github.com/drainkit/drainkit/pause/httpsource"
)

// A program that reaches AgentENV's node API: the preset, with the list
// path overridden on the command line.
func Example() {
	fs := flag.NewFlagSet("prog", flag.ContinueOnError)
	var api apiflags.Flags
	api.Register(fs)
	_ = fs.Parse([]string{"-api", "agentenv", "-list-path", "/v2/sandboxes"})
	if err := api.Finish(fs); err != nil {
		fmt.Println(err)
		return
	}
	cfg := api.Config() // with the API key: DRAINKIT_API_KEY's, or -api-key-file's for New to read
	src, err := httpsource.New(apiflags.DefaultServerURL[api.API], cfg)
	fmt.Println(api.API, cfg.ListPath, cfg.IDField, src != nil, err)
	// Output: agentenv /v2/sandboxes sandboxID true <nil>
}
