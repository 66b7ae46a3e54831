package main

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/cri-guard/cri-guard/internal/config"
)

// lastGoodName is the copy of the last config file cri-guard started or
// reloaded with, in the state directory. A config file that an edit broke
// is then not a node without a runtime, nor a node run on other settings
// than the operator's: cri-guard starts with the copy, degraded, and says so.
const lastGoodName = "config.last-good.yaml"

// saveLastGood writes the file's bytes as the last good config
// (write-to-temporary, fsync, rename): a crash leaves the old copy or the new.
func saveLastGood(stateDir string, data []byte) error {
	f, err := os.CreateTemp(stateDir, "."+lastGoodName+".*")
	if err != nil {
		return fmt.Errorf("save last good config: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(stateDir, lastGoodName))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("save last good config: %w", err)
	}
	return nil
}

// loadLastGood reads the last good config of stateDir and when it was saved.
func loadLastGood(stateDir string) (config.Config, []byte, time.Time, error) {
	p := filepath.Join(stateDir, lastGoodName)
	st, err := os.Stat(p)
	if err != nil {
		return config.Config{}, nil, time.Time{}, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return config.Config{}, nil, time.Time{}, err
	}
	cfg, _, err := config.LoadLenient(p)
	return cfg, b, st.ModTime(), err
}

// startConfig is the config file cri-guard starts with, and what it found
// wrong. Nothing in the file is a reason not to serve the CRI socket:
//   - unknown keys are left out with a warning (as the kubelet's lenient
//     decoding does), and so is an empty file (the defaults);
//   - a file that does not load (a bad value, not YAML, unreadable) is
//     replaced by the last good config of the state directory, or, without
//     one, by the defaults with dryRun on: serving, deciding nothing from
//     settings the operator did not write (a typo must not drop their
//     critical namespaces and evict those pods);
//   - hard thresholds that would fire at once on this node, and were not
//     the ones in force (the last good config's), are taken for a mistake
//     (100Gi on an 8 GiB node evicts every pod in a second): the last good
//     config's thresholds apply instead, or the defaults'.
//
// stateDir is the state directory from the command line (the file's own
// may be unreadable). firing is check-config's test of hard thresholds
// against the node (firingHardThresholds).
func startConfig(path, stateDir string, firing func(config.Config) ([]string, error)) (cfg config.Config, raw []byte, warnings, problems []string) {
	cfg, warnings, err := config.LoadLenient(path)
	if err == nil {
		raw, err = os.ReadFile(path)
	}
	if err == nil && cfg.StateDir != "" {
		stateDir = cfg.StateDir
	}
	good, goodRaw, saved, gerr := loadLastGood(stateDir)
	if err != nil {
		reason := "config file rejected (" + strings.Join(problemLines(err, path), "; ") + ")"
		if gerr == nil {
			problems = append(problems, fmt.Sprintf("%s: running the last good config saved %s", reason, saved.UTC().Format(time.RFC3339)))
			return good, goodRaw, warnings, problems
		}
		d := config.Default()
		d.DryRun = true
		problems = append(problems, reason+": no last good config in "+stateDir+": running the defaults in dry run (nothing is evicted)")
		return d, nil, warnings, problems
	}
	fired, ferr := firing(cfg)
	if ferr != nil {
		warnings = append(warnings, "node check of the hard thresholds skipped: "+ferr.Error())
	}
	if len(fired) == 0 {
		return cfg, raw, warnings, nil
	}
	reason := strings.Join(fired, "; ")
	if gerr == nil && sameThresholds(cfg, good) {
		// in force before: the node is under real pressure, not misconfigured
		return cfg, raw, warnings, nil
	}
	fallback, from := config.Default(), "the defaults"
	if gerr == nil {
		if f, _ := firing(good); len(f) == 0 {
			fallback, from = good, fmt.Sprintf("the last good config's (saved %s)", saved.UTC().Format(time.RFC3339))
		}
	}
	setThresholds(&cfg, fallback)
	problems = append(problems, fmt.Sprintf("thresholds refused (%s): running with %s", reason, from))
	// raw is not saved as the last good: its thresholds were not used
	return cfg, nil, warnings, problems
}

// sameThresholds reports whether a and b set the same eviction thresholds.
func sameThresholds(a, b config.Config) bool {
	var x, y config.Config
	setThresholds(&x, a)
	setThresholds(&y, b)
	return reflect.DeepEqual(x, y)
}

// setThresholds copies src's eviction thresholds into dst: what a reload
// applies (withoutThresholds clears the same fields).
func setThresholds(dst *config.Config, src config.Config) {
	dst.EvictionHard, dst.EvictionSoft = src.EvictionHard, src.EvictionSoft
	dst.EvictionSoftGracePeriod, dst.EvictionMinimumReclaim = src.EvictionSoftGracePeriod, src.EvictionMinimumReclaim
	dst.EvictionPressureTransitionPeriod = src.EvictionPressureTransitionPeriod
	dst.EnforceNodeAllocatable = src.EnforceNodeAllocatable
}
