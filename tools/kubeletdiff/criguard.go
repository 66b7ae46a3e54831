package main

import (
	"fmt"
	"io"
	"time"

	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/config"
	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// criSide is one cri-guard evictor with a fake sampler fed from the scenario.
type criSide struct {
	cfg   config.Config
	ths   []pressure.Threshold
	mgr   *evictor.Manager
	now   time.Time
	node  pressure.NodeSample
	stats map[string]pressure.PodStats // by cgroup parent; absent = ErrNoStats
	// requests says whether pod stats carry the memory request (MemoryQoS
	// cgroups: memory.min) or not (CRI only).
	requests bool
}

func (c *criSide) Node() (pressure.NodeSample, error) { return c.node, nil }

func (c *criSide) Pod(parent string) (pressure.PodStats, error) {
	st, ok := c.stats[parent]
	if !ok {
		return pressure.PodStats{}, pressure.ErrNoStats
	}
	return st, nil
}

var _ evictor.Sampler = (*criSide)(nil)

// loadCRIConfig parses the scenario's cri-guard YAML as cmd/cri-guard does.
func loadCRIConfig(yamlBody []byte) (config.Config, []pressure.Threshold, error) {
	cfg, err := config.Parse(yamlBody)
	if err != nil {
		return config.Config{}, nil, err
	}
	ths, err := cfg.Thresholds()
	if err != nil {
		return config.Config{}, nil, err
	}
	return cfg, ths, nil
}

func newCRISide(cfg config.Config, ths []pressure.Threshold, start time.Time, requests bool) (*criSide, error) {
	c := &criSide{cfg: cfg, ths: ths, now: start, requests: requests, stats: map[string]pressure.PodStats{}}
	log := logrus.New()
	log.SetOutput(io.Discard)
	m, err := evictor.New(evictor.Config{
		Thresholds:        ths,
		TransitionPeriod:  cfg.EvictionPressureTransitionPeriod.Duration,
		MaxPodGracePeriod: cfg.EvictionMaxPodGracePeriod.Duration,
		HardGracePeriod:   time.Second,
		OnStatsError:      evictor.StatsErrorPolicy(cfg.OnStatsError),
	}, evictor.Options{Sampler: c, Now: func() time.Time { return c.now }, Log: logrus.NewEntry(log)})
	if err != nil {
		return nil, err
	}
	c.mgr = m
	return c, nil
}

// criPod builds cri-guard's record of p from the RunPodSandbox request the
// kubelet would send for it: what CRI can observe (cgroup parent → QoS,
// annotations → static and, when cluster policy stamps it, priority).
func criPod(p *podSpec, rules pod.CriticalRules, now time.Time) (*pod.Pod, error) {
	ann := map[string]string{}
	if p.Static {
		ann[pod.AnnotationConfigSource] = "file"
	} else {
		ann[pod.AnnotationConfigSource] = "api"
	}
	if p.Priority != nil {
		ann[rules.PriorityAnnotation] = fmt.Sprint(*p.Priority)
	}
	req := &runtimeapi.PodSandboxConfig{
		Metadata:    &runtimeapi.PodSandboxMetadata{Name: p.Name, Uid: p.UID, Namespace: "default"},
		Annotations: ann,
		Linux:       &runtimeapi.LinuxPodSandboxConfig{CgroupParent: p.cgroupParent()},
	}
	cp, err := pod.FromSandboxConfig(req, "", rules, now)
	if err != nil {
		return nil, fmt.Errorf("cri-guard pod %q: %w", p.Name, err)
	}
	cp.State = pod.StateReady
	cp.SandboxID = "sb-" + p.UID
	return cp, nil
}

// criGrace is the grace period cri-guard gives e's pod whose
// terminationGracePeriodSeconds is tgps (nil: unknown to cri-guard).
// The one call site to change when evictor grows Eviction.PodGrace.
func criGrace(e *evictor.Eviction, tgps *int64) time.Duration {
	if tgps == nil {
		return e.PodGrace(0, false)
	}
	return e.PodGrace(time.Duration(*tgps)*time.Second, true)
}
