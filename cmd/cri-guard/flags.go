package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/cri-guard/cri-guard/internal/config"
	"github.com/cri-guard/cri-guard/internal/server"
)

// options is the daemon's effective configuration: the config file (or the
// defaults) with the flags that were given applied on top.
type options struct {
	// ConfigPath is --config ("" = defaults only).
	ConfigPath string
	Config     config.Config
	// FileConfig is the file as loaded, before flags (zero without
	// --config); a reload compares the file with it.
	FileConfig config.Config
	// ShutdownTimeout bounds the graceful stop.
	ShutdownTimeout time.Duration
	// Warnings are what the config file had that was left out (unknown
	// keys, an empty file): logged at start.
	Warnings []string
	// Problems say why the config file was not used as it is (it does not
	// load, or its thresholds would fire at once): cri-guard serves
	// degraded with the last good config or the safe defaults.
	Problems []string
	// configRaw is the file as read when it is used as it is: saved as the
	// last good config once cri-guard serves with it.
	configRaw []byte
	// RestoreTimeout bounds how long start-up waits for the restore before
	// serving degraded (the restore is then retried in the background).
	RestoreTimeout time.Duration
}

// defaultRestoreTimeout: containerd restarts in seconds; a restore that
// still fails after a minute will not succeed by waiting, and the kubelet
// cannot even remove pods while cri-guard does not listen.
const defaultRestoreTimeout = time.Minute

func defaultOptions() options {
	return options{Config: config.Default(), ShutdownTimeout: server.DefaultShutdownTimeout, RestoreTimeout: defaultRestoreTimeout}
}

// flagValues holds the raw flag values; only flags that were set override
// the file.
type flagValues struct {
	config, listen, runtimeEndpoint, stateDir, cgroupRoot, procRoot, logLevel, logFormat string
	dryRun                                                                               bool
}

func (v *flagValues) bind(fs *flag.FlagSet, d config.Config) {
	fs.StringVar(&v.config, "config", "", "YAML config file (flags override it)")
	fs.StringVar(&v.listen, "listen", d.Listen, "unix socket the kubelet connects to")
	fs.StringVar(&v.runtimeEndpoint, "runtime-endpoint", d.RuntimeEndpoint, "containerd's CRI unix socket")
	fs.StringVar(&v.stateDir, "state-dir", d.StateDir, "directory of the sandbox checkpoints")
	fs.StringVar(&v.cgroupRoot, "cgroup-root", d.CgroupRoot, "where the cgroup filesystems are mounted")
	fs.StringVar(&v.procRoot, "proc-root", d.ProcRoot, "where proc is mounted (meminfo, pressure/memory)")
	fs.BoolVar(&v.dryRun, "dry-run", d.DryRun, "log and count evictions, stop nothing")
	fs.StringVar(&v.logLevel, "log-level", d.Log.Level, "log level: trace, debug, info, warn, error")
	fs.StringVar(&v.logFormat, "log-format", d.Log.Format, "log format: text or json")
}

// parseFlags parses the daemon command line, loads --config and applies the
// flags that were set over it.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := defaultOptions()
	var v flagValues
	fs := flag.NewFlagSet("cri-guard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: cri-guard [flags]\n       cri-guard status [--admin PATH] [--json]\n       cri-guard check-config [--skip-node-check] FILE\n       cri-guard version\n\nflags:\n")
		fs.PrintDefaults()
	}
	v.bind(fs, o.Config)
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if v.config != "" {
		stateDir := o.Config.StateDir
		if isSet(fs, "state-dir") {
			stateDir = v.stateDir
		}
		cfg, raw, warnings, problems := startConfig(v.config, stateDir, firingHardThresholds)
		o.ConfigPath, o.Config, o.FileConfig = v.config, cfg, cfg
		o.configRaw, o.Warnings, o.Problems = raw, warnings, problems
	}
	applyFlags(fs, &v, &o.Config)
	if err := o.validate(); err != nil {
		return options{}, err
	}
	return o, nil
}

// isSet reports whether the flag name was given.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// applyFlags copies the flags that were set on the command line into cfg.
func applyFlags(fs *flag.FlagSet, v *flagValues, cfg *config.Config) {
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "listen":
			cfg.Listen = v.listen
		case "runtime-endpoint":
			cfg.RuntimeEndpoint = v.runtimeEndpoint
		case "state-dir":
			cfg.StateDir = v.stateDir
		case "cgroup-root":
			cfg.CgroupRoot = v.cgroupRoot
		case "proc-root":
			cfg.ProcRoot = v.procRoot
		case "dry-run":
			cfg.DryRun = v.dryRun
		case "log-level":
			cfg.Log.Level = v.logLevel
		case "log-format":
			cfg.Log.Format = v.logFormat
		}
	})
}

func (o *options) validate() error {
	if err := o.Config.Validate(); err != nil {
		return err
	}
	if o.Config.Listen == o.Config.RuntimeEndpoint {
		return fmt.Errorf("listen and runtimeEndpoint are the same socket %q", o.Config.Listen)
	}
	return nil
}
