package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/cri-guard/cri-guard/internal/config"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// checkConfig is `cri-guard check-config [--skip-node-check] FILE`: it
// prints the effective configuration as YAML and exits 0, or prints every
// problem, one per line and naming its field, and exits 1. Besides
// config.Load's checks it samples the node (from the file's cgroupRoot and
// procRoot) and reports hard thresholds that would fire on it right now.
func checkConfig(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	skipNode := fs.Bool("skip-node-check", false, "do not sample this node for hard thresholds that would fire now")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: cri-guard check-config [--skip-node-check] FILE\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	path := fs.Arg(0)
	cfg, problems := checkConfigFile(path, !*skipNode, stderr)
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintf(stderr, "%s: %s\n", path, p)
		}
		return 1
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "cri-guard: encode config: %v\n", err)
		return 1
	}
	_, _ = stdout.Write(b)
	return 0
}

// checkConfigFile loads path and returns the problems found, one message
// per field; with nodeCheck, hard thresholds that the node already meets
// are problems too. A node that cannot be sampled is a warning on warn.
func checkConfigFile(path string, nodeCheck bool, warn io.Writer) (config.Config, []string) {
	cfg, warnings, err := config.Check(path)
	if err != nil {
		return cfg, problemLines(err, path)
	}
	// what the daemon would log as it loads the file (a removed key, an
	// empty file): it starts with it, so these do not fail the check
	for _, w := range warnings {
		fmt.Fprintf(warn, "%s: warning: %s\n", path, w)
	}
	problems := kubeconfigProblems(cfg, path, warn)
	if !nodeCheck {
		return cfg, problems
	}
	fired, err := firingHardThresholds(cfg)
	if err != nil {
		fmt.Fprintf(warn, "%s: warning: node check skipped: %v\n", path, err)
	}
	return cfg, append(problems, fired...)
}

// kubeconfigProblems checks the kubeconfig the config names: one that
// exists must load (a file that does not is an operator's mistake that the
// daemon could only retry forever); one that does not exist yet is a
// warning only, as on a node that joins the kubelet writes its kubeconfig
// after its TLS bootstrap, and cri-guard waits for it while it serves.
func kubeconfigProblems(cfg config.Config, path string, warn io.Writer) []string {
	var problems []string
	check := func(field, file string) {
		if file == "" {
			return
		}
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(warn, "%s: warning: %s: %q does not exist yet: cri-guard serves CRI-only until it does\n", path, field, file)
			return
		}
		if _, err := clientcmd.LoadFromFile(file); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", field, err))
		}
	}
	check("kubernetes.kubeconfig", cfg.Kubernetes.Kubeconfig)
	return problems
}

// problemLines flattens config errors into one line per problem, sorted so
// that the output is stable.
func problemLines(err error, path string) []string {
	var errs config.Errors
	var leaves []error
	if errors.As(err, &errs) {
		leaves = errs
	} else {
		leaves = []error{err}
	}
	var out []string
	prefix := fmt.Sprintf("config %q: ", path)
	for _, e := range leaves {
		for _, line := range strings.Split(e.Error(), "\n") {
			if line = strings.TrimSpace(strings.TrimPrefix(line, prefix)); line != "" {
				out = append(out, line)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// firingHardThresholds samples the node once and evaluates the hard
// thresholds: any that is met now would evict as soon as cri-guard starts.
func firingHardThresholds(cfg config.Config) ([]string, error) {
	ts, err := cfg.Thresholds()
	if err != nil {
		return nil, err
	}
	var hard []pressure.Threshold
	for _, t := range ts {
		if t.Hard {
			hard = append(hard, t)
		}
	}
	if len(hard) == 0 {
		return nil, nil
	}
	s, err := pressure.NewSampler(pressure.SamplerConfig{CgroupRoot: cfg.CgroupRoot, ProcRoot: cfg.ProcRoot, PodsCgroup: cfg.PodsCgroup, SubtractHugePages: cfg.SubtractHugePages()})
	if err != nil {
		return nil, err
	}
	sample, err := s.Node()
	if err != nil {
		return nil, err
	}
	res := pressure.NewEvaluator(hard, 0).Evaluate(sample.Time, sample.Observations())
	var out []string
	for _, m := range res.Met {
		out = append(out, fmt.Sprintf("evictionHard[%s]: %s would fire now: %s is %s",
			m.Threshold.Signal, m.Threshold.Value, m.Threshold.Signal, m.Observed))
	}
	slices.Sort(out)
	return out, nil
}
