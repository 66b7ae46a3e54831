package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/runtimeproxy/fakeruntime"
)

// BenchmarkStartToVersion: the time from start to the first CRI Version
// answered, healthy and with each optional part broken (each once made
// cri-guard exit at start: the kubelet then had no runtime). Every broken
// case should take no longer than the healthy one: nothing optional is
// waited for. ns/op is one start (restore against an empty fake runtime
// included) up to the answer.
//
//	go test -run '^$' -bench StartToVersion -benchtime 20x ./cmd/cri-guard/
func BenchmarkStartToVersion(b *testing.B) {
	cases := []struct {
		name  string
		spoil func(b *testing.B, dir string, o *options)
	}{
		{"healthy", nil},
		{"metrics-port-held", func(b *testing.B, dir string, o *options) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			o.Config.MetricsAddress = l.Addr().String()
		}},
		{"admin-socket-held", func(b *testing.B, dir string, o *options) {
			if err := os.MkdirAll(filepath.Dir(o.Config.AdminSocket), 0o750); err != nil {
				b.Fatal(err)
			}
			l, err := net.Listen("unix", o.Config.AdminSocket)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
		}},
		{"kubeconfig-missing", func(b *testing.B, dir string, o *options) {
			o.Config.Kubernetes.Kubeconfig, o.Config.Kubernetes.NodeName = filepath.Join(dir, "kubelet.conf"), "n"
		}},
		{"state-lock-a-directory", func(b *testing.B, dir string, o *options) {
			if err := os.MkdirAll(filepath.Join(o.Config.StateDir, ".lock"), 0o700); err != nil {
				b.Fatal(err)
			}
		}},
		{"config-file-broken", func(b *testing.B, dir string, o *options) {
			path := filepath.Join(dir, "config.yaml")
			if err := os.WriteFile(path, []byte("housekeepingInterval: often\n"), 0o600); err != nil {
				b.Fatal(err)
			}
			cfg, _, _, problems := startConfig(path, o.Config.StateDir, firingHardThresholds)
			if len(problems) == 0 {
				b.Fatal("a broken file was taken as it is")
			}
			keep := o.Config
			o.Config = cfg
			o.Config.Listen, o.Config.RuntimeEndpoint, o.Config.StateDir = keep.Listen, keep.RuntimeEndpoint, keep.StateDir
			o.Config.AdminSocket, o.Config.MetricsAddress, o.Config.PSITrigger = keep.AdminSocket, keep.MetricsAddress, ""
			o.Config.CgroupRoot, o.Config.ProcRoot = keep.CgroupRoot, keep.ProcRoot
			o.Problems = problems
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			dir, err := os.MkdirTemp("", "cgb")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = os.RemoveAll(dir) })
			fake := fakeruntime.Start(b, filepath.Join(dir, "rt.sock"))
			log := logrus.New()
			log.SetOutput(io.Discard)
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				root := filepath.Join(dir, "r", strconv.Itoa(i))
				opts := testOptions(b, root, fake.Path)
				co := &opts.Config
				if c.spoil != nil {
					c.spoil(b, root, &opts)
				}
				// redialled every 2 ms until the socket listens: the figure is
				// the daemon's start, not the client's reconnect back-off
				conn, err := grpc.NewClient("unix://"+co.Listen, grpc.WithTransportCredentials(insecure.NewCredentials()),
					grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 2 * time.Millisecond, Multiplier: 1, MaxDelay: 2 * time.Millisecond}, MinConnectTimeout: time.Second}))
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				b.StartTimer()
				go func() { done <- run(ctx, opts, log.WithField("component", "main")) }()
				wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
				_, err = runtimeapi.NewRuntimeServiceClient(conn).Version(wctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
				b.StopTimer()
				wcancel()
				if err != nil {
					b.Fatalf("no Version answered: %v", err)
				}
				cancel()
				if err := <-done; err != nil {
					b.Fatalf("run: %v", err)
				}
				_ = conn.Close()
				b.StartTimer()
			}
		})
	}
}
