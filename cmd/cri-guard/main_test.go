package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/logging"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy/fakeruntime"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    options
		wantErr string
	}{
		{name: "defaults", want: defaultOptions()},
		{name: "all flags", args: []string{"--listen", "/tmp/a.sock", "--runtime-endpoint", "/tmp/b.sock", "--log-level", "debug", "--log-format", "json",
			"--state-dir", "/tmp/st", "--cgroup-root", "/tmp/cg", "--proc-root", "/tmp/proc", "--dry-run"},
			want: func() options {
				o := defaultOptions()
				c := &o.Config
				c.Listen, c.RuntimeEndpoint, c.Log.Level, c.Log.Format = "/tmp/a.sock", "/tmp/b.sock", "debug", "json"
				c.StateDir, c.CgroupRoot, c.ProcRoot, c.DryRun = "/tmp/st", "/tmp/cg", "/tmp/proc", true
				return o
			}()},
		{name: "same socket", args: []string{"--listen", "/x.sock", "--runtime-endpoint", "/x.sock"}, wantErr: "same socket"},
		{name: "empty listen", args: []string{"--listen", ""}, wantErr: "listen: must not be empty"},
		{name: "stray argument", args: []string{"serve"}, wantErr: "unexpected argument"},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFlags(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestNewLogger(t *testing.T) {
	tests := []struct {
		name, level, format string
		wantErr             bool
	}{
		{"text info", "info", "text", false},
		{"json debug", "debug", "json", false},
		{"bad level", "loud", "text", true},
		{"bad format", "info", "xml", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			l, err := logging.New(tt.level, tt.format, &buf)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			l.WithField("component", "test").Info("hello")
			if tt.format == "json" {
				var m map[string]any
				if err := json.Unmarshal(buf.Bytes(), &m); err != nil || m["component"] != "test" || m["msg"] != "hello" {
					t.Errorf("json line %q: %v", buf.String(), err)
				}
			} else if !strings.Contains(buf.String(), "component=test") {
				t.Errorf("text line %q", buf.String())
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	var out bytes.Buffer
	if code := realMain([]string{"version"}, &out, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.HasPrefix(out.String(), "cri-guard ") {
		t.Errorf("version output %q", out.String())
	}
}

func TestRunServesAndStops(t *testing.T) {
	dir, err := os.MkdirTemp("", "cgm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	fake := fakeruntime.Start(t, filepath.Join(dir, "rt.sock"))
	opts := defaultOptions()
	opts.Config.Listen = filepath.Join(dir, "g", "cri-guard.sock")
	opts.Config.RuntimeEndpoint = fake.Path
	opts.Config.StateDir = filepath.Join(dir, "state")
	opts.Config.AdminSocket = filepath.Join(dir, "g", "admin.sock")
	opts.Config.MetricsAddress = ""
	log := logrus.New()
	log.SetOutput(io.Discard)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, opts, log.WithField("component", "main")) }()

	conn, err := grpc.NewClient("unix://"+opts.Config.Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	callCtx, callCancel := context.WithTimeout(ctx, 30*time.Second)
	defer callCancel()
	// WaitForReady: the socket appears once run has started listening.
	resp, err := rt.Version(callCtx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if resp.RuntimeName != "fakeRuntime" {
		t.Errorf("runtime name %q", resp.RuntimeName)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if _, err := os.Lstat(opts.Config.Listen); !os.IsNotExist(err) {
		t.Errorf("socket left behind after stop: %v", err)
	}
}
