package benchutil

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// Subcommand runs a subcommand of cri-guard-bench: its flags (exit code 2
// when bad), then run until it ends or SIGTERM/SIGINT (1 when it fails).
func Subcommand[O any](name string, args []string, parse func([]string, io.Writer) (O, error), run func(context.Context, O, *logrus.Entry, io.Writer) error) int {
	o, err := parse(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cri-guard-bench %s: %v\n", name, err)
		return 2
	}
	log := logrus.New()
	log.SetOutput(os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, o, log.WithField("component", name), os.Stdout); err != nil {
		log.WithError(err).Error(name + " failed")
		return 1
	}
	return 0
}

// SleepCtx sleeps d, or less if ctx ends.
func SleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
