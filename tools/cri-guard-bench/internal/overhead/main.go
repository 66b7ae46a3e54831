package overhead

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sirupsen/logrus"
)

// Main is `cri-guard-bench [flags]`, the benchmark without a subcommand;
// it returns the exit code: 2 for bad flags, 1 when the benchmark fails.
func Main(args []string) int {
	o, err := parseBenchFlags(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cri-guard-bench: %v\n", err)
		return 2
	}
	log := logrus.New()
	log.SetOutput(os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := benchmark(ctx, o, log.WithField("component", "bench"), os.Stdout); err != nil {
		log.WithError(err).Error("benchmark failed")
		return 1
	}
	return 0
}

// ServeCoreMain is `cri-guard-bench serve-core`, the proxy core alone that
// Main starts when no --cri-guard-binary is given; it returns the exit code.
func ServeCoreMain(args []string) int {
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serveCore(ctx, args, log.WithField("component", "main")); err != nil {
		log.WithError(err).Error("serve-core failed")
		return 1
	}
	return 0
}
