package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"time"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/kubernetes/pkg/kubelet/eviction"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"
	"k8s.io/kubernetes/pkg/kubelet/kubeletconfig/configfiles"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/kubernetes/pkg/kubelet/server/stats"
	utilfs "k8s.io/kubernetes/pkg/util/filesystem"
	testingclock "k8s.io/utils/clock/testing"
)

// How the kubelet's Manager is driven.
//
// eviction.NewManager returns the Manager interface, whose one-pass method
// (*managerImpl).synchronize is unexported; Start runs it in a goroutine
// that sleeps in real time and, after an eviction, waits for the pod's
// cleanup on the injected clock. The kubelet's own tests call synchronize
// directly. We do the same, with the package compiled unmodified, through a
// pull go:linkname to the method's symbol: a method is a function whose first
// argument is the receiver, so the declaration below has the same ABI as
// func (m *managerImpl) synchronize(context.Context, DiskInfoProvider,
// ActivePodsFunc) ([]*v1.Pod, error) in k8s.io/kubernetes v1.37.2 (pinned in
// go.mod; 1.34 had no ctx: the linker does not check the signature, so
// TestKubeletDriver checks a known eviction and a signature change cannot
// pass silently).
// The linker restricts pull linknames only into the standard library
// (cmd/link -checklinkname); this one needs no flag, so plain `go test` and
// `go run .` work. The alternative, `go build -overlay` adding an exporting
// file to the package, needs a generated overlay file with absolute
// module-cache paths on every go command.
//
//go:linkname kubeletSynchronize k8s.io/kubernetes/pkg/kubelet/eviction.(*managerImpl).synchronize
func kubeletSynchronize(m unsafe.Pointer, ctx context.Context, d eviction.DiskInfoProvider, podFunc eviction.ActivePodsFunc) ([]*v1.Pod, error)

// kubeletConfig is what the kubelet binary derives from a config file:
// eviction.Config as pkg/kubelet/kubelet.go NewMainKubelet builds it.
type kubeletConfig struct {
	Eviction eviction.Config
	// EvictionHardKeys lists the evictionHard keys in force (defaults merged).
	EvictionHard map[string]string
}

// loadKubeletConfig runs the kubelet's own file loader (decode, v1beta1
// defaulting, conversion) on a KubeletConfiguration file holding the
// scenario's eviction settings, then what cmd/kubelet/app/server.go
// loadConfigFile and pkg/kubelet/kubelet.go
// NewMainKubelet do with it.
func loadKubeletConfig(dir string, yamlBody []byte) (kubeletConfig, error) {
	name := filepath.Join(dir, "kubelet.yaml")
	body := append([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"), yamlBody...)
	if err := os.WriteFile(name, body, 0o600); err != nil {
		return kubeletConfig{}, fmt.Errorf("write kubelet config: %w", err)
	}
	loader, err := configfiles.NewFsLoader(&utilfs.DefaultFs{}, name)
	if err != nil {
		return kubeletConfig{}, fmt.Errorf("kubelet config loader: %w", err)
	}
	kc, err := loader.Load(context.Background())
	if err != nil {
		return kubeletConfig{}, err
	}
	// server.go loadConfigFile: an absent evictionHard gets the defaults;
	// a present one is merged with them only with mergeDefaultEvictionSettings.
	if kc.EvictionHard == nil {
		kc.EvictionHard = eviction.DefaultEvictionHard
	} else if kc.MergeDefaultEvictionSettings {
		for k, v := range eviction.DefaultEvictionHard {
			if _, exists := kc.EvictionHard[k]; !exists {
				kc.EvictionHard[k] = v
			}
		}
	}
	// kubelet.go NewMainKubelet (experimentalNodeAllocatableIgnoreEvictionThreshold false).
	thresholds, err := eviction.ParseThresholdConfig(kc.EnforceNodeAllocatable, kc.EvictionHard, kc.EvictionSoft, kc.EvictionSoftGracePeriod, kc.EvictionMinimumReclaim)
	if err != nil {
		return kubeletConfig{}, err
	}
	return kubeletConfig{
		Eviction: eviction.Config{
			PressureTransitionPeriod: kc.EvictionPressureTransitionPeriod.Duration,
			MaxPodGracePeriodSeconds: int64(kc.EvictionMaxPodGracePeriod),
			Thresholds:               thresholds,
		},
		EvictionHard: kc.EvictionHard,
	}, nil
}

// kubeletSide is one kubelet eviction manager with its fakes.
type kubeletSide struct {
	cfg   kubeletConfig
	clock *testingclock.FakeClock
	mgr   eviction.Manager
	admit lifecycle.PodAdmitHandler
	impl  unsafe.Pointer
	// summary is the step's stats, which the summary provider serves
	// (summary.go); node is the Node it adjusts memory.available by.
	summary *statsapi.Summary
	node    *v1.Node
	pods    []*v1.Pod
	killed  []kubeletKill
}

// kubeletKill is one call of the recording kill func.
type kubeletKill struct {
	Pod     *v1.Pod
	Grace   int64
	Message string
}

type fakeDiskInfoProvider struct{}

func (fakeDiskInfoProvider) HasDedicatedImageFs(context.Context) (bool, error)     { return false, nil }
func (fakeDiskInfoProvider) HasDedicatedContainerFs(context.Context) (bool, error) { return false, nil }

type fakeGC struct{}

func (fakeGC) DeleteUnusedImages(context.Context) error              { return nil }
func (fakeGC) DeleteAllUnusedContainers(context.Context) error       { return nil }
func (fakeGC) IsContainerFsSeparateFromImageFs(context.Context) bool { return false }

func newKubeletSide(cfg kubeletConfig, start time.Time, node *v1.Node) (*kubeletSide, error) {
	k := &kubeletSide{cfg: cfg, clock: testingclock.NewFakeClock(start), node: node}
	kill := func(p *v1.Pod, _ bool, grace *int64, fn func(*v1.PodStatus)) error {
		st := &v1.PodStatus{}
		fn(st)
		k.killed = append(k.killed, kubeletKill{Pod: p, Grace: *grace, Message: st.Message})
		return nil
	}
	nodeRef := &v1.ObjectReference{Kind: "Node", Name: "node", UID: types.UID("node"), Namespace: ""}
	// A FakeRecorder without a channel drops events.
	summary := stats.NewSummaryProvider(context.Background(), fakeStatsProvider{k: k})
	k.mgr, k.admit = eviction.NewManager(summary, cfg.Eviction, kill, fakeGC{}, fakeGC{}, &record.FakeRecorder{}, nodeRef, k.clock, false)
	rv := reflect.ValueOf(k.mgr)
	if got := rv.Type().String(); got != "*eviction.managerImpl" {
		return nil, fmt.Errorf("kubelet eviction manager is a %s, want *eviction.managerImpl", got)
	}
	k.impl = rv.UnsafePointer()
	return k, nil
}

// synchronize runs one pass of the kubelet's loop and returns the kill of
// that pass, if any.
func (k *kubeletSide) synchronize() (*kubeletKill, error) {
	n := len(k.killed)
	_, err := kubeletSynchronize(k.impl, context.Background(), fakeDiskInfoProvider{}, func() []*v1.Pod { return k.pods })
	if err != nil {
		return nil, err
	}
	switch len(k.killed) - n {
	case 0:
		return nil, nil
	case 1:
		return &k.killed[n], nil
	default:
		return nil, fmt.Errorf("kubelet killed %d pods in one pass", len(k.killed)-n)
	}
}

// actingThresholds reads the manager's thresholdsMet (the thresholds whose
// grace period is satisfied, as the last pass left them) and lastObservations:
// the kubelet sorts them with a comparator that calls every memory threshold
// "less" than any other (byEvictionPriority) after collecting them from a map,
// so the one it acts on, and names in the message, is any of them: a kubelet tie.
func (k *kubeletSide) actingThresholds() []actingThreshold {
	mv := reflect.ValueOf(k.mgr).Elem()
	met := field(mv, "thresholdsMet").Interface().([]evictionapi.Threshold)
	obs := field(mv, "lastObservations")
	var out []actingThreshold
	for _, t := range met {
		o := obs.MapIndex(reflect.ValueOf(t.Signal))
		if !o.IsValid() {
			continue
		}
		c := reflect.New(o.Type()).Elem()
		c.Set(o)
		avail := field(c, "available").Interface().(*resource.Quantity)
		capa := field(c, "capacity").Interface().(*resource.Quantity)
		out = append(out, actingThreshold{T: t, Quantity: evictionapi.GetThresholdQuantity(t.Value, capa), Available: avail})
	}
	return out
}

// actingThreshold is one threshold the kubelet may act on, with the figures
// of its eviction message.
type actingThreshold struct {
	T         evictionapi.Threshold
	Quantity  *resource.Quantity
	Available *resource.Quantity
}

// field reads an unexported field of an addressable struct value (read only:
// the kubelet's state is never written).
func field(v reflect.Value, name string) reflect.Value {
	f := v.FieldByName(name)
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}
