package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

const gi = 1 << 30

func testPods() []*pod.Pod {
	return []*pod.Pod{
		{Namespace: "kube-system", Name: "etcd", UID: "u-etcd", QOS: pod.Burstable, Critical: true, State: pod.StateReady, CgroupParent: "etcd"},
		{Namespace: "default", Name: "small", UID: "u-small", QOS: pod.BestEffort, Evictable: true, State: pod.StateReady, CgroupParent: "small"},
		{Namespace: "default", Name: "big", UID: "u-big", QOS: pod.BestEffort, Evictable: true, State: pod.StateReady, CgroupParent: "big"},
		{Namespace: "default", Name: "nostats", UID: "u-nostats", QOS: pod.Burstable, Evictable: true, State: pod.StateReady, CgroupParent: "gone"},
		{Namespace: "default", Name: "pending", UID: "u-pending", QOS: pod.BestEffort, Evictable: true, State: pod.StatePending},
	}
}

func testStats(parent string) (pressure.PodStats, error) {
	switch parent {
	case "etcd":
		return pressure.PodStats{HasMemory: true, WorkingSetBytes: 3 * gi}, nil
	case "small":
		return pressure.PodStats{HasMemory: true, WorkingSetBytes: 1 << 20}, nil
	case "big":
		return pressure.PodStats{HasMemory: true, WorkingSetBytes: gi}, nil
	}
	return pressure.PodStats{}, pressure.ErrNoStats
}

// statsSampler is the node and pods of these tests, for a real eviction
// manager whose snapshot Build reads.
type statsSampler struct{}

func (statsSampler) Node() (pressure.NodeSample, error) {
	return pressure.NodeSample{Source: pressure.SourceMeminfo, CapacityBytes: 4 * gi, WorkingSetBytes: 4*gi - 512<<20, AvailableBytes: 512 << 20,
		HasPSI: true, Full: pressure.PSI{Avg10: 1.5}}, nil
}

func (statsSampler) Pod(parent string) (pressure.PodStats, error) { return testStats(parent) }

// testNow is the time of the manager's pass in testSources.
var testNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func testSources(t *testing.T) Sources {
	ts, err := pressure.ParseThresholds(pressure.ThresholdConfig{
		Hard:            map[string]string{"memory.available": "1Gi", "memory.pressure.full.avg10": "40%"},
		Soft:            map[string]string{"memory.available": "25%"},
		SoftGracePeriod: map[string]string{"memory.available": "30s"},
	})
	if err != nil {
		t.Fatal(err)
	}
	now := testNow
	m, err := evictor.New(evictor.Config{Thresholds: ts, DryRun: true},
		evictor.Options{Sampler: statsSampler{}, Now: func() time.Time { return now }, Log: logrus.NewEntry(logrus.New())})
	if err != nil {
		t.Fatal(err)
	}
	if a := m.Synchronize(evictor.Pass{Active: testPods()}); a.Err != nil {
		t.Fatal(a.Err)
	}
	m.Admit(&evictor.Attributes{Pod: &pod.Pod{Name: "refused", QOS: pod.BestEffort}})
	return Sources{
		Version: "test", DryRun: true,
		Snapshot: m.Snapshot,
		Pods:     testPods,
		Runtime: func() Runtime {
			return Runtime{Endpoint: "/run/containerd/containerd.sock", State: "READY", Connected: true}
		},
		Now: func() time.Time { return now },
	}
}

func TestBuild(t *testing.T) {
	s := Build(testSources(t))
	var order []string
	for _, p := range s.Pods {
		order = append(order, p.Name)
	}
	// No stats first, then larger usage; critical and pending pods are not ranked.
	if want := []string{"nostats", "big", "small", "etcd", "pending"}; !reflect.DeepEqual(order, want) {
		t.Errorf("pod order %v, want %v", order, want)
	}
	if p := s.Pods[1]; p.Rank != 2 || !p.HasStats || p.WorkingSetBytes != gi || p.QOS != "BestEffort" {
		t.Errorf("big: %+v", p)
	}
	// not a candidate: the eviction manager reads no stats for it
	if p := s.Pods[3]; p.Rank != 0 || !p.Critical || p.HasStats {
		t.Errorf("etcd: %+v", p)
	}
	since := testNow
	want := []Signal{
		{Signal: "memory.available", Observed: "512Mi", Value: 512 << 20, Thresholds: []Threshold{
			{Kind: "hard", Value: "1Gi", Limit: gi, Crossed: true, Acting: true, Since: &since},
			{Kind: "soft", Value: "25%", Limit: gi, Crossed: true, Pending: true, Since: &since, GracePeriod: "30s"},
		}},
		{Signal: "memory.pressure.full.avg10", Observed: pressure.Observation{Signal: pressure.SignalPSIFullAvg10, Percent: 1.5}.String(), Value: 1.5, Thresholds: []Threshold{
			{Kind: "hard", Value: "40%", Limit: 40},
		}},
		{Signal: "memory.pressure.full.avg60", Observed: "0%"},
		{Signal: "memory.pressure.some.avg10", Observed: "0%"},
		{Signal: "memory.pressure.some.avg60", Observed: "0%"},
	}
	if !reflect.DeepEqual(s.Signals, want) {
		t.Errorf("signals\n got %+v\nwant %+v", s.Signals, want)
	}
	// the dry-run choice of the pass, then the refusal
	if !reflect.DeepEqual(s.Conditions, []string{"MemoryPressure"}) || len(s.Decisions) != 2 || !s.DryRun || !s.Runtime.Connected {
		t.Errorf("status %+v", s)
	}
}

func TestBuildEmpty(t *testing.T) {
	s := Build(Sources{})
	if s.Conditions == nil || s.Pods == nil || s.Signals == nil || s.Decisions == nil {
		t.Errorf("nil slices would encode as null: %+v", s)
	}
}

func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cga")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func serve(t *testing.T, path string, src Sources) {
	t.Helper()
	l, err := Listen(path, logrus.NewEntry(logrus.New()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := logrus.New()
	log.SetOutput(io.Discard)
	go func() {
		done <- Serve(ctx, l, Handler(func() Status { return Build(src) }), log.WithField("component", "admin"))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
}

func TestServeAndFetch(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "run", "admin.sock")
	src := testSources(t)
	serve(t, path, src)
	for p, want := range map[string]os.FileMode{path: socketMode, filepath.Dir(path): dirMode} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s mode %o, want %o", p, got, want)
		}
	}
	got, err := Fetch(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	want := Build(src)
	if !got.Time.Equal(want.Time) || !reflect.DeepEqual(got.Pods, want.Pods) || !reflect.DeepEqual(got.Signals, want.Signals) ||
		len(got.Decisions) != 2 || got.Decisions[1].Message != want.Decisions[1].Message {
		t.Errorf("fetched\n%+v\nwant\n%+v", got, want)
	}
	raw, err := FetchRaw(context.Background(), path)
	if err != nil || !strings.Contains(string(raw), `"rank": 1`) {
		t.Errorf("raw %s, %v", raw, err)
	}
}

func TestFetchNotRunning(t *testing.T) {
	dir := shortDir(t)
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = l.Close()
	tests := []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(dir, "none.sock"), "is cri-guard running? no admin socket at " + filepath.Join(dir, "none.sock")},
		{"stale", stale, "is cri-guard running? nothing listens on the admin socket at " + stale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Fetch(context.Background(), tt.path)
			if !errors.Is(err, errNotRunning) || err.Error() != tt.want {
				t.Errorf("err %v, want %q", err, tt.want)
			}
		})
	}
}

func TestListen(t *testing.T) {
	dir := shortDir(t)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = l.Close()
	live := filepath.Join(dir, "live.sock")
	ll, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer ll.Close()
	tests := []struct {
		name, path, wantErr string
	}{
		{"not a socket", file, "exists and is not a socket"},
		{"stale socket replaced", stale, ""},
		{"live socket kept", live, "another process is listening"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := Listen(tt.path, logrus.NewEntry(logrus.New()))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				_ = l.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestBuildState: the state directory's line is its own field, apart
// from the restore's Degraded, and survives the JSON round trip.
func TestBuildState(t *testing.T) {
	since := testNow.Add(-time.Minute)
	want := State{Dir: "/var/lib/cri-guard", Error: "open /var/lib/cri-guard/.lock: is a directory", Since: since,
		Unsaved: 3, LastWriteError: "checkpoint store unavailable", FailingSince: since}
	s := Build(Sources{State: func() State { return want }, Degraded: func() error { return nil }})
	if s.State == nil || *s.State != want || s.Degraded != "" {
		t.Fatalf("state = %+v, degraded %q; want %+v and no restore degradation", s.State, s.Degraded, want)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Status
	if err := json.Unmarshal(b, &back); err != nil || back.State == nil || !back.State.Since.Equal(since) || back.State.Unsaved != 3 || back.State.Available {
		t.Fatalf("round trip: %+v, %v\n%s", back.State, err, b)
	}
	if s := Build(Sources{}); s.State != nil {
		t.Fatalf("state without a source = %+v, want none", s.State)
	}
}

// TestBuildHugePages: the pool of the sample shown, and whether
// memory.available had it taken off; none when the node has no pool.
func TestBuildHugePages(t *testing.T) {
	for _, tc := range []struct {
		snap evictor.Status
		want *HugePages
	}{
		{evictor.Status{HugePagesBytes: gi, HugePagesSubtracted: true}, &HugePages{Bytes: gi, Subtracted: true}},
		{evictor.Status{HugePagesBytes: 6 << 20}, &HugePages{Bytes: 6 << 20}},
		{evictor.Status{}, nil},
	} {
		s := Build(Sources{Snapshot: func() evictor.Status { return tc.snap }})
		if !reflect.DeepEqual(s.HugePages, tc.want) {
			t.Errorf("snapshot %+v: huge pages %+v, want %+v", tc.snap, s.HugePages, tc.want)
		}
	}
}
