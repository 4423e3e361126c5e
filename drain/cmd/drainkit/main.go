package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses, the same for every command.
const (
	exitOK    = 0 // done; for plan: every sandbox fits
	exitNoFit = 1 // plan: the sandboxes do not fit in the grace period; report: the drain lost sandboxes or missed SIGKILL
	exitUsage = 2 // bad flags or arguments, or input that cannot be read
)

const usage = `drainkit answers the three questions of a sandbox fleet's operator.

Usage:

	drainkit <command> [flags] [arguments]

Commands:

	plan     before the rollout: will every sandbox be preserved inside the grace period?
	         Reads the live server (or a JSON list of sandbox sizes) and the rates the
	         server learned; exits 1 when the sandboxes do not fit, so it can gate a
	         rollout in CI/CD.
	report   afterwards: what happened on the node. Renders a drain Report
	         (sandboxd's last-shutdown.json, or the supervisor's -report file) as text,
	         and with -svg as a timeline that opens in a browser.
	sim      past one machine: a DaemonSet rolling update over a fleet in virtual time,
	         the seed's behaviour beside drainkit's.

Run "drainkit <command> -h" for a command's flags and examples.
During a drain, the server's own log has a progress line every few seconds
("preserved 120/200, 3 failed, 41s to the preserve deadline").
`

// run runs the command line args (without the program name) and returns the
// exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmds := map[string]func(context.Context, []string, io.Writer, io.Writer) int{
		"plan":   runPlan,
		"report": runReport,
		"sim":    runSim,
	}
	switch name := args[0]; name {
	case "-h", "-help", "--help", "help":
		if len(args) == 1 {
			fmt.Fprint(stdout, usage)
			return exitOK
		}
		// "drainkit help report"; help for a command drainkit lacks is that command
		// unknown, not the commands on stdout with exit 0 (row 1476).
		cmd, ok := cmds[args[1]]
		if !ok {
			return unknownCommand(stderr, args[1])
		}
		return cmd(ctx, []string{"-h"}, stdout, stdout)
	default:
		cmd, ok := cmds[name]
		if !ok {
			return unknownCommand(stderr, name)
		}
		return cmd(ctx, args[1:], stdout, stderr)
	}
}

// unknownCommand says that drainkit has no command name, and which it has.
func unknownCommand(stderr io.Writer, name string) int {
	fmt.Fprintf(stderr, "drainkit: unknown command %q\n\n%s", name, usage)
	return exitUsage
}

// newFlags returns a FlagSet for a command whose -h prints text (what the
// command does, then its flags) to stdout.
func newFlags(name, text string, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("drainkit "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprint(stdout, text)
		fmt.Fprintln(stdout, "\nFlags:")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parse parses args with fs, allowing flags after the positional
// arguments too ("drainkit report FILE -svg OUT"), and returns the
// positional arguments. It returns flag.ErrHelp after printing the usage
// once for -h, and an error naming the flag otherwise, with nothing
// printed: the caller reports it on stderr (usageError).
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	// The flag package calls Usage itself, for -h and for every bad flag
	// alike: the help went to stdout twice, and with a bad flag's error.
	usage := fs.Usage
	fs.Usage = func() {}
	defer func() { fs.Usage = usage }()
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				usage()
			}
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// usageError reports a bad command line on stderr and returns exitUsage
// (exitOK after -h, whose usage parse already printed).
func usageError(stderr io.Writer, cmd string, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintf(stderr, "drainkit %s: %v\nRun \"drainkit %s -h\" for usage.\n", cmd, err, cmd)
	return exitUsage
}
