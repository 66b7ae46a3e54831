package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/admin"
	"github.com/cri-guard/cri-guard/internal/config"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy/fakeruntime"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// testDaemon is an in-process cri-guard in front of the fake runtime.
type testDaemon struct {
	opts options
	rt   runtimeapi.RuntimeServiceClient
}

// startDaemon runs run() on a fake node and a fake runtime until the test ends.
func startDaemon(t *testing.T, mutate func(*options)) *testDaemon {
	t.Helper()
	return startDaemonOn(t, nil, mutate)
}

// startDaemonOn is startDaemon with the fake runtime prepared by before.
func startDaemonOn(t *testing.T, before func(*fakeruntime.Backend), mutate func(*options)) *testDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "cgs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	fake := fakeruntime.Start(t, filepath.Join(dir, "rt.sock"))
	if before != nil {
		before(fake)
	}
	opts := testOptions(t, dir, fake.Path)
	c := &opts.Config
	if mutate != nil {
		mutate(&opts)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, opts, log.WithField("component", "main")) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	conn, err := grpc.NewClient("unix://"+c.Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	d := &testDaemon{opts: opts, rt: runtimeapi.NewRuntimeServiceClient(conn)}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if _, err := d.rt.Version(wctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	return d
}

// testOptions are the daemon's options on a fake node under dir in front
// of the runtime at endpoint: sockets and state under dir, no metrics, no
// PSI trigger.
func testOptions(t testing.TB, dir, endpoint string) options {
	t.Helper()
	cg, proc := fakeNode(t, dir)
	opts := defaultOptions()
	c := &opts.Config
	c.Listen, c.RuntimeEndpoint, c.StateDir = filepath.Join(dir, "g", "cri-guard.sock"), endpoint, filepath.Join(dir, "state")
	c.AdminSocket, c.MetricsAddress, c.PSITrigger = filepath.Join(dir, "g", "admin.sock"), "", ""
	c.CgroupRoot, c.ProcRoot = cg, proc
	return opts
}

func (d *testDaemon) runPod(t *testing.T, name string) {
	t.Helper()
	_, err := d.rt.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: "uid-" + name},
		Linux:    &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "kubepods/besteffort/poduid-" + name},
	}})
	if err != nil {
		t.Fatal(err)
	}
}

func TestStatusCommand(t *testing.T) {
	d := startDaemon(t, func(o *options) { o.Config.HousekeepingInterval = config.Duration{Duration: 100 * time.Millisecond} })
	d.runPod(t, "web")
	socket := d.opts.Config.AdminSocket
	// the ranking shown is the eviction manager's, from its next pass
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := admin.Fetch(context.Background(), socket)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Pods) == 1 && st.Pods[0].Rank == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("web not ranked by a pass within 10s: %+v", st.Pods)
		}
		time.Sleep(50 * time.Millisecond)
	}

	var out, errOut bytes.Buffer
	if code := realMain([]string{"status", "--admin", socket}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"conditions:  none", "memory.available", "hard <100Mi", "default/web", "BestEffort", "admit"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status table lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	if code := realMain([]string{"status", "--admin", socket, "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var st admin.Status
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out.String())
	}
	if len(st.Pods) != 1 || st.Pods[0].Name != "web" || st.Pods[0].QOS != "BestEffort" || st.Pods[0].Rank != 1 || st.Pods[0].State != "ready" {
		t.Errorf("pods %+v", st.Pods)
	}
	if len(st.Decisions) == 0 || st.Decisions[len(st.Decisions)-1].Kind != "admit" {
		t.Errorf("decisions %+v", st.Decisions)
	}
	if !st.Runtime.Connected || st.Runtime.Endpoint != "unix://"+d.opts.Config.RuntimeEndpoint {
		t.Errorf("runtime %+v", st.Runtime)
	}
	var avail *admin.Signal
	for i := range st.Signals {
		if st.Signals[i].Signal == "memory.available" {
			avail = &st.Signals[i]
		}
	}
	if avail == nil || avail.Value != 2<<30 {
		t.Errorf("signals %+v", st.Signals)
	}
}

func TestStatusNotRunning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "admin.sock")
	var out, errOut bytes.Buffer
	if code := realMain([]string{"status", "--admin", path}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d", code)
	}
	if want := "cri-guard: is cri-guard running? no admin socket at " + path + "\n"; errOut.String() != want {
		t.Errorf("stderr %q, want %q", errOut.String(), want)
	}
}

func TestRunServesMetrics(t *testing.T) {
	addr := testutil.FreeAddr(t)
	d := startDaemon(t, func(o *options) { o.Config.MetricsAddress = addr })
	d.runPod(t, "web")
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`cri_guard_cri_request_duration_seconds_count{method="/runtime.v1.RuntimeService/RunPodSandbox"} 1`,
		`cri_guard_admissions_total{reason="",result="admit"} 1`,
		`cri_guard_checkpoint_operations_total{op="put",result="ok"} 2`,
		`cri_guard_runtime_connected 1`,
		`cri_guard_node_condition{condition="MemoryPressure"} 0`,
		`cri_guard_threshold_value{kind="hard",signal="memory.available"} 1.048576e+08`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", b)
	}
}

// TestRestoreDegraded: a runtime whose ListPodSandbox keeps failing (e.g.
// an answer over the message limit) does not keep cri-guard from serving:
// after the restore timeout it serves degraded, says so in status, and
// finishes the restore in the background once the runtime answers.
func TestRestoreDegraded(t *testing.T) {
	d := startDaemonOn(t, func(f *fakeruntime.Backend) {
		for range 4 { // about 2 s of failures, then answers
			f.Runtime.InjectError("ListPodSandbox", status.Error(codes.ResourceExhausted, "grpc: received message larger than max"))
		}
	}, func(o *options) { o.RestoreTimeout = 500 * time.Millisecond })
	st, err := admin.Fetch(context.Background(), d.opts.Config.AdminSocket)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.Degraded, "larger than max") {
		t.Fatalf("degraded = %q, want the restore's error", st.Degraded)
	}
	d.runPod(t, "while-degraded") // admission works meanwhile
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err = admin.Fetch(context.Background(), d.opts.Config.AdminSocket)
		if err != nil {
			t.Fatal(err)
		}
		if st.Degraded == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still degraded after 20s: %s", st.Degraded)
		}
		time.Sleep(100 * time.Millisecond)
	}
	found := false
	for _, p := range st.Pods {
		found = found || p.Name == "while-degraded"
	}
	if !found {
		t.Fatalf("pod admitted while degraded lost by the restore: %+v", st.Pods)
	}
}

// TestRestoreTooLarge: a sandbox list larger than a message may carry
// (containerd's own send limit) does not heal by waiting:
// start-up serves degraded at once, however long restoreTimeout is, and the
// background retry finishes the restore. Other failures are waited for.
func TestRestoreTooLarge(t *testing.T) {
	tests := []struct {
		name         string
		err          error
		wantDegraded bool
	}{
		{name: "too large", err: status.Error(codes.ResourceExhausted, "grpc: trying to send message larger than max (25167936 vs. 16777216)"), wantDegraded: true},
		{name: "not ready yet", err: status.Error(codes.Unknown, "server is not initialized yet"), wantDegraded: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// an hour: a start-up that waited would not answer within
			// startDaemonOn's 30 s
			d := startDaemonOn(t, func(f *fakeruntime.Backend) {
				f.Runtime.InjectError("ListPodSandbox", tt.err)
			}, func(o *options) { o.RestoreTimeout = time.Hour })
			st, err := admin.Fetch(context.Background(), d.opts.Config.AdminSocket)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Degraded != ""; got != tt.wantDegraded {
				t.Fatalf("degraded = %q at start-up, want degraded %v", st.Degraded, tt.wantDegraded)
			}
			deadline := time.Now().Add(20 * time.Second)
			for st.Degraded != "" {
				if time.Now().After(deadline) {
					t.Fatalf("still degraded after 20s: %s", st.Degraded)
				}
				time.Sleep(100 * time.Millisecond)
				if st, err = admin.Fetch(context.Background(), d.opts.Config.AdminSocket); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestStatsFIFO: a FIFO put at meminfo while cri-guard runs (or a hung
// mount) stops nothing: RunPodSandbox is answered (onStatsError: admit),
// status answers and shows the stats error, the file put back recovers,
// and shutdown is not held up.
func TestStatsFIFO(t *testing.T) {
	d := startDaemonOn(t, nil, func(o *options) {
		o.Config.HousekeepingInterval = config.Duration{Duration: 200 * time.Millisecond}
	})
	meminfo := filepath.Join(d.opts.Config.ProcRoot, "meminfo")
	orig, err := os.ReadFile(meminfo)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(meminfo); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(meminfo, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // a few passes on the FIFO
	start := time.Now()
	d.runPod(t, "with-fifo")
	t.Logf("RunPodSandbox answered in %v with a FIFO at meminfo", time.Since(start))
	st, err := admin.Fetch(context.Background(), d.opts.Config.AdminSocket)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.StatsError, "not a regular file") {
		t.Fatalf("stats error = %q, want the FIFO named", st.StatsError)
	}
	if err := os.Remove(meminfo); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(meminfo, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err = admin.Fetch(context.Background(), d.opts.Config.AdminSocket)
		if err != nil {
			t.Fatal(err)
		}
		if st.StatsError == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats error after meminfo is back: %s", st.StatsError)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
