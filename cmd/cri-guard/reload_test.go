package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/cri-guard/cri-guard/internal/admin"
	"github.com/cri-guard/cri-guard/internal/config"
	"github.com/cri-guard/cri-guard/internal/pressure"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

func TestReload(t *testing.T) {
	errApply := errors.New("loop stopped")
	tests := []struct {
		name        string
		noPath      bool
		file        string
		applyErr    error
		wantErr     bool
		wantApplied []string // thresholds passed to apply; nil = not called
		wantLog     string
	}{
		{name: "no config file", noPath: true, wantLog: "nothing to reload"},
		{name: "new thresholds", file: "evictionHard: {memory.available: 1Gi}\nevictionPressureTransitionPeriod: 1m\n",
			wantApplied: []string{"hard memory.available<1Gi"}, wantLog: "eviction thresholds reloaded"},
		{name: "other changes need a restart", file: "listen: /run/other.sock\n",
			wantApplied: []string{"hard memory.available<100Mi"}, wantLog: "need a restart"},
		{name: "bad file keeps the old thresholds", file: "evictionHard: {memory.available: -1Gi}\nonStatsError: maybe\n", wantErr: true,
			wantLog: `problem="evictionHard[memory.available]: eviction threshold must be positive: -1Gi"`},
		{name: "apply fails", file: "evictionHard: {memory.available: 1Gi}\n", applyErr: errApply, wantErr: true,
			wantApplied: []string{"hard memory.available<1Gi"}, wantLog: "not applied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(tt.file), 0o644); err != nil {
				t.Fatal(err)
			}
			logger, hook := logtest.NewNullLogger()
			var applied []string
			var transition time.Duration
			r := &reloader{path: path, current: config.Default(), log: logger.WithField("component", "reload"),
				apply: func(_ context.Context, ts []pressure.Threshold, tr time.Duration) error {
					applied = []string{}
					for _, th := range ts {
						applied = append(applied, th.String())
					}
					transition = tr
					return tt.applyErr
				}}
			if tt.noPath {
				r.path = ""
			}
			err := r.reload(context.Background())
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if strings.Join(applied, ",") != strings.Join(tt.wantApplied, ",") || (applied == nil) != (tt.wantApplied == nil) {
				t.Errorf("applied %v, want %v", applied, tt.wantApplied)
			}
			if tt.name == "new thresholds" && transition != time.Minute {
				t.Errorf("transition %v", transition)
			}
			var logs []string
			for _, e := range hook.AllEntries() {
				s, _ := e.String()
				logs = append(logs, s)
			}
			if !strings.Contains(strings.Join(logs, ""), tt.wantLog) {
				t.Errorf("logs lack %q:\n%s", tt.wantLog, strings.Join(logs, ""))
			}
		})
	}
}

// TestRunReloadsOnSIGHUP sends the process a real SIGHUP while run() holds
// it and waits until the admin socket shows the new threshold.
func TestRunReloadsOnSIGHUP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("evictionHard: {memory.available: 100Mi}\n")
	d := startDaemon(t, func(o *options) {
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		o.ConfigPath, o.FileConfig = path, cfg
	})
	hardValue := func() string {
		st, err := admin.Fetch(context.Background(), d.opts.Config.AdminSocket)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st.Signals {
			if s.Signal == "memory.available" && len(s.Thresholds) > 0 {
				return s.Thresholds[0].Value
			}
		}
		return ""
	}
	if got := hardValue(); got != "100Mi" {
		t.Fatalf("hard threshold %q before reload", got)
	}
	write("evictionHard: {memory.available: 1Gi}\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !testutil.Within(testutil.Bound, func() bool { return hardValue() == "1Gi" }) {
		t.Fatalf("threshold still %q after SIGHUP", hardValue())
	}
	// The CRI socket still serves after the reload.
	d.runPod(t, "after-reload")
}
