package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/config"
)

// idleOptions are the settings of `cri-guard-bench idle`.
type idleOptions struct {
	RuntimeEndpoint string
	Binary          string
	CgroupRoot      string
	Modes           []string
	Duration        time.Duration
	Settle          time.Duration
}

// idleMain is `cri-guard-bench idle`: the race modes' cri-guards started
// side by side on one idle pods cgroup (the race's 1Gi domain, empty), so
// that each arms what it would on a node (memcg notification, fast poll's
// watch), and their CPU time over the same interval; it returns the exit
// code.
func idleMain(args []string) int { return subcommand("idle", args, parseIdleFlags, idle) }

func parseIdleFlags(args []string, stderr io.Writer) (idleOptions, error) {
	o := idleOptions{}
	fs := flag.NewFlagSet("cri-guard-bench idle", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.RuntimeEndpoint, "runtime-endpoint", config.DefaultRuntimeEndpoint, "containerd's CRI socket")
	fs.StringVar(&o.Binary, "cri-guard-binary", "bin/cri-guard", "the cri-guard binary measured")
	fs.StringVar(&o.CgroupRoot, "cgroup-parent-root", "/cri-guard-rt-pods", "the pods cgroup is <root>/idle-<pid>")
	modes := fs.String("modes", "default,psi", "race modes measured side by side (psi: the previous release's default)")
	fs.DurationVar(&o.Duration, "duration", 10*time.Minute, "how long CPU time is measured")
	fs.DurationVar(&o.Settle, "settle", 10*time.Second, "wait after start-up before measuring")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	o.Modes, err = parseModes(*modes)
	return o, err
}

func idle(ctx context.Context, o idleOptions, log *logrus.Entry, out io.Writer) (err error) {
	workDir, err := os.MkdirTemp("", "cri-guard-idle")
	if err != nil {
		return err
	}
	defer os.RemoveAll(workDir)
	dom, err := newDomain(fmt.Sprintf("%s/idle-%d", o.CgroupRoot, os.Getpid()), 1<<30)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dom.remove()) }()
	ro := raceOptions{Threshold: 200 << 20}
	pids := make([]int, len(o.Modes))
	for i, mode := range o.Modes {
		dir := filepath.Join(workDir, mode)
		if err := os.MkdirAll(filepath.Join(dir, "state"), 0o750); err != nil {
			return err
		}
		cfgPath := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(cfgPath, []byte(raceConfig(ro, mode, filepath.Join(dir, "state"), dom)), 0o600); err != nil {
			return err
		}
		p, err := startChild(benchOptions{RuntimeEndpoint: o.RuntimeEndpoint, ProxyArgs: "--config " + cfgPath}, o.Binary, nil, dir, log.WithField("mode", mode))
		if err != nil {
			return err
		}
		defer func() {
			if err := p.stop(); err != nil {
				log.WithError(err).Warn("stop cri-guard")
			}
		}()
		conn, c, err := dial(p.endpoint)
		if err != nil {
			return err
		}
		vctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err = c.rt.Version(vctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
		cancel()
		conn.Close()
		if err != nil {
			return fmt.Errorf("mode %s: cri-guard not serving: %w", mode, err)
		}
		pids[i] = p.pid
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(o.Settle):
	}
	before := make([]procStats, len(pids))
	for i, pid := range pids {
		if before[i], err = readProcStats(pid); err != nil {
			return err
		}
	}
	start := time.Now()
	log.WithField("duration", o.Duration).Info("measuring idle CPU")
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(o.Duration):
	}
	elapsed := time.Since(start)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "idle CPU over %s (pods cgroup %s, 1Gi, empty; 10 ms ticks)\n", elapsed.Round(time.Second), dom.group)
	fmt.Fprintln(tw, "mode\tCPU time\t% of one core\tVmRSS MiB\tconfig added to the shipped defaults")
	for i, pid := range pids {
		after, err := readProcStats(pid)
		if err != nil {
			return err
		}
		cpu := after.cpu - before[i].cpu
		extra := strings.ReplaceAll(strings.TrimSpace(raceModes[o.Modes[i]]), "\n", "; ")
		if extra == "" {
			extra = "(none)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.1f\t%s\n", o.Modes[i], cpu, 100*cpu.Seconds()/elapsed.Seconds(), float64(after.rssKiB)/1024, extra)
	}
	return tw.Flush()
}
