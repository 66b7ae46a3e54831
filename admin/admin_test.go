package admin

import (
	"context"
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

	"github.com/cri-guard/cri-guard/evictor"
	"github.com/cri-guard/cri-guard/pod"
	"github.com/cri-guard/cri-guard/pressure"
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

func testSources(t *testing.T) Sources {
	ts, err := pressure.ParseThresholds(pressure.ThresholdConfig{
		Hard:            map[string]string{"memory.available": "1Gi", "memory.pressure.full.avg10": "40%"},
		Soft:            map[string]string{"memory.available": "25%"},
		SoftGracePeriod: map[string]string{"memory.available": "30s"},
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return Sources{
		Version: "test", DryRun: true,
		Snapshot: func() evictor.Status {
			return evictor.Status{
				SampledAt: now.Add(-time.Second), Source: pressure.SourceMeminfo,
				Observed: map[pressure.Signal]pressure.Observation{
					pressure.SignalMemoryAvailable: {Signal: pressure.SignalMemoryAvailable, Available: 512 << 20, Capacity: 4 * gi},
					pressure.SignalPSIFullAvg10:    {Signal: pressure.SignalPSIFullAvg10, Percent: 1.5},
				},
				Conditions: []string{evictor.ConditionMemoryPressure},
				Decisions:  []evictor.Decision{{Time: now, Kind: evictor.KindRefuse, Reason: evictor.ReasonEvicted, Message: "The node had condition: [MemoryPressure]. "}},
			}
		},
		Pods:       testPods,
		Thresholds: func() []pressure.Threshold { return ts },
		PodStats:   testStats,
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
	if p := s.Pods[3]; p.Rank != 0 || !p.Critical || p.WorkingSetBytes != 3*gi {
		t.Errorf("etcd: %+v", p)
	}
	want := []Signal{
		{Signal: "memory.available", Observed: "512Mi", Value: 512 << 20, Thresholds: []Threshold{
			{Kind: "hard", Value: "1Gi", Limit: gi, Crossed: true},
			{Kind: "soft", Value: "25%", Limit: gi, Crossed: true, GracePeriod: "30s"},
		}},
		{Signal: "memory.pressure.full.avg10", Observed: pressure.Observation{Signal: pressure.SignalPSIFullAvg10, Percent: 1.5}.String(), Value: 1.5, Thresholds: []Threshold{
			{Kind: "hard", Value: "40%", Limit: 40},
		}},
	}
	if !reflect.DeepEqual(s.Signals, want) {
		t.Errorf("signals\n got %+v\nwant %+v", s.Signals, want)
	}
	if !reflect.DeepEqual(s.Conditions, []string{"MemoryPressure"}) || len(s.Decisions) != 1 || !s.DryRun || !s.Runtime.Connected {
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
	l, err := Listen(path)
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
	for p, want := range map[string]os.FileMode{path: SocketMode, filepath.Dir(path): DirMode} {
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
		len(got.Decisions) != 1 || got.Decisions[0].Message != want.Decisions[0].Message {
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
			if !errors.Is(err, ErrNotRunning) || err.Error() != tt.want {
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
			l, err := Listen(tt.path)
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
