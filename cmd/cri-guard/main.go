package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/cri-guard/cri-guard/internal/logging"
)

func main() {
	setMaxProcs(os.Getenv)
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// realMain dispatches subcommands and returns the exit code.
func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "version":
			fmt.Fprintln(stdout, versionString())
			return 0
		case "status":
			return statusCmd(context.Background(), args[1:], stdout, stderr)
		case "check-config":
			return checkConfig(args[1:], stdout, stderr)
		}
	}
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "cri-guard: %v\n", err)
		return 2
	}
	logger, err := logging.New(opts.Config.Log.Level, opts.Config.Log.Format, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "cri-guard: %v\n", err)
		return 2
	}
	for _, w := range opts.Warnings {
		logger.WithField("config", opts.ConfigPath).WithField("problem", w).Warn("config file: left out")
	}
	for _, p := range opts.Problems {
		logger.WithField("config", opts.ConfigPath).WithField("problem", p).Error("config file not used as it is: serving degraded")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, opts, logger.WithField("component", "main")); err != nil {
		logger.WithError(err).Error("cri-guard failed")
		return 1
	}
	return 0
}
