package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/cri-guard/cri-guard/internal/config"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// fireAbove is a node check for tests: a memory.available hard threshold
// above limit "fires now", as on a node with limit bytes available.
func fireAbove(limit string) func(config.Config) ([]string, error) {
	return func(c config.Config) ([]string, error) {
		ts, err := c.Thresholds()
		if err != nil {
			return nil, err
		}
		var out []string
		for _, th := range ts {
			if th.Hard && th.Signal == pressure.SignalMemoryAvailable && th.Value.Quantity != nil &&
				th.Value.Quantity.Cmp(resource.MustParse(limit)) > 0 {
				out = append(out, "evictionHard[memory.available]: "+th.Value.Quantity.String()+" would fire now")
			}
		}
		return out, nil
	}
}

func writeFile(t *testing.T, path, body string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestStartConfig: what the daemon starts with for each kind of config
// file. None of them keeps it from serving the CRI socket.
func TestStartConfig(t *testing.T) {
	never := fireAbove("1Ei")
	type want struct {
		hard     string // evictionHard[memory.available]
		dryRun   bool
		problem  string // substring of the one problem; "" none
		warning  string // substring of a warning; "" none
		saveable bool   // the file's bytes may become the last good config
	}
	tests := []struct {
		name     string
		file     string // "" : no file at all
		lastGood string // "" : none saved
		firing   func(config.Config) ([]string, error)
		want     want
	}{
		{name: "good file", file: "evictionHard: {memory.available: 1Gi}\n", firing: never,
			want: want{hard: "1Gi", saveable: true}},
		{name: "unknown key is left out", file: "evictionHard: {memory.available: 1Gi}\nnewerReleaseKey: true\n", firing: never,
			want: want{hard: "1Gi", warning: "newerReleaseKey: unknown field: ignored", saveable: true}},
		{name: "empty file is the defaults", file: "\n", firing: never,
			want: want{hard: "100Mi", warning: "empty", saveable: true}},
		{name: "missing file without a last good", firing: never,
			want: want{hard: "100Mi", dryRun: true, problem: "no last good config"}},
		{name: "bad value runs the last good", file: "evictionHard: {memory.available: lots}\n", lastGood: "evictionHard: {memory.available: 300Mi}\n", firing: never,
			want: want{hard: "300Mi", problem: "running the last good config saved", saveable: true}},
		{name: "thresholds that fire now: defaults", file: "evictionHard: {memory.available: 100Gi}\n", firing: fireAbove("8Gi"),
			want: want{hard: "100Mi", problem: "thresholds refused (evictionHard[memory.available]: 100Gi would fire now): running with the defaults"}},
		{name: "thresholds that fire now: the last good's", file: "evictionHard: {memory.available: 100Gi}\n", lastGood: "evictionHard: {memory.available: 500Mi}\n", firing: fireAbove("8Gi"),
			want: want{hard: "500Mi", problem: "running with the last good config's"}},
		{name: "thresholds in force that fire now: real pressure", file: "evictionHard: {memory.available: 1Gi}\n", lastGood: "evictionHard: {memory.available: 1Gi}\n", firing: fireAbove("512Mi"),
			want: want{hard: "1Gi", saveable: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			state := filepath.Join(dir, "state")
			if err := os.Mkdir(state, 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "config.yaml")
			switch {
			case strings.TrimSpace(tt.file) != "":
				writeFile(t, path, tt.file+"stateDir: "+state+"\n")
			case tt.file != "":
				writeFile(t, path, tt.file)
			}
			if tt.lastGood != "" {
				if err := saveLastGood(state, []byte(tt.lastGood)); err != nil {
					t.Fatal(err)
				}
			}
			cfg, raw, warnings, problems := startConfig(path, state, tt.firing)
			if got := cfg.EvictionHard["memory.available"]; got != tt.want.hard {
				t.Errorf("evictionHard = %q, want %q", got, tt.want.hard)
			}
			if cfg.DryRun != tt.want.dryRun {
				t.Errorf("dryRun = %v, want %v", cfg.DryRun, tt.want.dryRun)
			}
			switch {
			case tt.want.problem == "" && len(problems) > 0:
				t.Errorf("problems %q, want none", problems)
			case tt.want.problem != "" && (len(problems) != 1 || !strings.Contains(problems[0], tt.want.problem)):
				t.Errorf("problems %q, want one saying %q", problems, tt.want.problem)
			}
			if tt.want.warning != "" && !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, tt.want.warning) }) {
				t.Errorf("warnings %q, want one saying %q", warnings, tt.want.warning)
			}
			if (raw != nil) != tt.want.saveable {
				t.Errorf("saveable = %v, want %v", raw != nil, tt.want.saveable)
			}
		})
	}
}

// TestReloadRefusesThresholdsThatFireNow: a reload whose hard thresholds the
// node already meets keeps the old ones (a SIGHUP with 100Gi on an 8 GiB
// node once stopped every pod within 23 ms); thresholds already in force
// are applied whatever the node shows. An applied file becomes the last
// good config.
func TestReloadRefusesThresholdsThatFireNow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	logger, hook := logtest.NewNullLogger()
	applied := 0
	cur := config.Default()
	r := &reloader{path: path, current: cur, log: logger.WithField("component", "reload"), firing: fireAbove("8Gi"), stateDir: dir,
		apply: func(context.Context, []pressure.Threshold, time.Duration) error { applied++; return nil }}

	writeFile(t, path, "evictionHard: {memory.available: 100Gi}\n")
	if err := r.reload(context.Background()); err == nil || applied != 0 {
		t.Fatalf("reload of thresholds that fire now: err %v, applied %d times; want refused", err, applied)
	}
	if !slices.ContainsFunc(hook.AllEntries(), func(e *logrus.Entry) bool {
		return e.Message == "config reload rejected: keeping the old thresholds" && strings.Contains(e.Data["problem"].(string), "100Gi would fire now")
	}) {
		t.Error("no log line says why the reload was refused")
	}
	if _, err := os.Stat(filepath.Join(dir, lastGoodName)); !os.IsNotExist(err) {
		t.Errorf("a refused file became the last good config: %v", err)
	}
	writeFile(t, path, "evictionHard: {memory.available: 1Gi}\nnotYetKnown: 1\n")
	if err := r.reload(context.Background()); err != nil || applied != 1 {
		t.Fatalf("reload of thresholds that do not fire (and an unknown key): err %v, applied %d; want applied", err, applied)
	}
	if b, err := os.ReadFile(filepath.Join(dir, lastGoodName)); err != nil || !strings.Contains(string(b), "1Gi") {
		t.Errorf("last good config after an applied reload: %q, %v", b, err)
	}
	// in force now: the same thresholds apply again even where they fire
	r.firing = fireAbove("512Mi")
	if err := r.reload(context.Background()); err != nil || applied != 2 {
		t.Fatalf("reload of the thresholds in force: err %v, applied %d; want applied", err, applied)
	}
}
