package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/fakenode"
)

// fleetOptions are the settings of `cri-guard-bench fleet`.
type fleetOptions struct {
	Binaries      []benchutil.NamedBinary // old, then new
	Nodes         int
	Pods          int
	Quiet         time.Duration
	After         time.Duration
	Down          time.Duration
	Settle        time.Duration
	RestartWindow time.Duration
	WaveShare     float64
	Dir           string
	KBin          string
	Mkcerts       string
	APIAddr       string
	EtcdClient    string
	EtcdPeer      string
	Out           string
	// Controller is the cri-guard-controller binary ("" runs none);
	// ControllerManifests the directory of its manifests.
	Controller          string
	ControllerManifests string
}

// fleetThreshold is cri-guard's default hard threshold of
// memory.available (config.Default), which the wave crosses.
const fleetThreshold = 100 << 20

func parseFleetFlags(args []string, stderr io.Writer) (fleetOptions, error) {
	o := fleetOptions{}
	fs := flag.NewFlagSet("cri-guard-bench fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	old := fs.String("old", "", "the baseline cri-guard binary (its fleet's nodes are old-0, old-1, ...)")
	nw := fs.String("new", "bin/cri-guard", "the cri-guard binary compared (nodes new-0, new-1, ...)")
	fs.IntVar(&o.Nodes, "nodes", 50, "nodes per fleet, each one cri-guard with its own identity")
	fs.IntVar(&o.Pods, "pods", 30, "Running pods bound to each node, each with a ready sandbox in the node's fake runtime")
	fs.DurationVar(&o.Settle, "settle", 30*time.Second, "after every cri-guard is synced, still the start phase (its first writes and watches)")
	fs.DurationVar(&o.Quiet, "quiet", 30*time.Minute, "the quiet phase: nothing changes")
	fs.DurationVar(&o.After, "after", 10*time.Minute, "the phase after the wave")
	fs.DurationVar(&o.Down, "down", 20*time.Second, "how long the API server stays stopped in the restart")
	fs.DurationVar(&o.RestartWindow, "restart-window", 5*time.Minute, "measured after the API server is ready again")
	fs.Float64Var(&o.WaveShare, "wave-share", 0.2, "share of each fleet's nodes put under memory pressure in the wave")
	fs.StringVar(&o.Dir, "dir", "/tmp/cri-guard-fleet", "the run's directory (PKI, etcd, audit logs, one directory per node); an earlier run's is removed")
	home, _ := os.UserHomeDir()
	fs.StringVar(&o.KBin, "kbin", filepath.Join(home, ".cache/cri-guard/kubernetes-v1.37.2/bin"), "directory of etcd and kube-apiserver (scripts/cluster.sh kbin)")
	fs.StringVar(&o.Mkcerts, "mkcerts", "bin/mkcerts", "the tools/mkcerts binary")
	fs.StringVar(&o.APIAddr, "api", "127.0.0.1:26443", "the API server's address")
	fs.StringVar(&o.EtcdClient, "etcd-client", "127.0.0.1:33790", "etcd's client address")
	fs.StringVar(&o.EtcdPeer, "etcd-peer", "127.0.0.1:33800", "etcd's peer address")
	fs.StringVar(&o.Out, "out", "", "write the raw counts as JSON to this file")
	fs.StringVar(&o.Controller, "controller", "", "the cri-guard-controller binary: run two replicas (leader and follower) as the Deployment would, with the ServiceAccount's identity; empty: none")
	fs.StringVar(&o.ControllerManifests, "controller-manifests", "contrib/controller", "the controller's manifests: all but the Deployment are applied, the Deployment's container args are the replicas' flags")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case *old == "" || *nw == "":
		return o, errors.New("--old and --new are required")
	case o.Nodes < 1 || o.Pods < 1:
		return o, errors.New("--nodes and --pods must be positive")
	case o.WaveShare < 0 || o.WaveShare > 1:
		return o, errors.New("--wave-share must be within [0, 1]")
	case o.Quiet <= 0 || o.After <= 0 || o.RestartWindow <= 0 || o.Down < 0:
		return o, errors.New("--quiet, --after and --restart-window must be positive")
	}
	for _, b := range []benchutil.NamedBinary{{Name: "old", Path: *old}, {Name: "new", Path: *nw}} {
		p, err := filepath.Abs(b.Path)
		if err != nil {
			return o, err
		}
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			return o, fmt.Errorf("--%s %q: not a file", b.Name, b.Path)
		}
		o.Binaries = append(o.Binaries, benchutil.NamedBinary{Name: b.Name, Path: p})
	}
	var err error
	if o.Mkcerts, err = filepath.Abs(o.Mkcerts); err != nil {
		return o, err
	}
	if o.Controller != "" {
		if o.Controller, err = filepath.Abs(o.Controller); err != nil {
			return o, err
		}
		if st, err := os.Stat(o.Controller); err != nil || st.IsDir() {
			return o, fmt.Errorf("--controller %q: not a file", o.Controller)
		}
		if st, err := os.Stat(o.ControllerManifests); err != nil || !st.IsDir() {
			return o, fmt.Errorf("--controller-manifests %q: not a directory", o.ControllerManifests)
		}
	}
	return o, nil
}

// Main is `cri-guard-bench fleet`: what a fleet of cri-guard daemons
// costs a real kube-apiserver, two binaries side by side (docs/fleet-benchmark.md).
func Main(args []string) int {
	return benchutil.Subcommand("fleet", args, parseFleetFlags, fleet)
}

// fleetResult is the JSON output (--out).
type fleetResult struct {
	Options struct {
		Old           string `json:"old"`
		New           string `json:"new"`
		Nodes         int    `json:"nodes"`
		Pods          int    `json:"pods"`
		Quiet         string `json:"quiet"`
		After         string `json:"after"`
		Down          string `json:"down"`
		RestartWindow string `json:"restart_window"`
		Controller    string `json:"controller,omitempty"`
	} `json:"options"`
	Phases    []fleetPhase   `json:"phases"`
	Wave      []waveResult   `json:"wave"`
	Aggregate fleetAggregate `json:"aggregate"`
	// RSS: per phase, VmRSS by group: the nodes' cri-guards by fleet, the
	// controller's replicas by role.
	RSS        map[string]map[string]rssStat `json:"rss"`
	Controller *ctlResult                    `json:"controller,omitempty"`
}

func fleet(ctx context.Context, o fleetOptions, log *logrus.Entry, out io.Writer) (err error) {
	if err := prepareFleetDir(o.Dir); err != nil {
		return err
	}
	var nodes []*fleetNode
	byFleet := map[string][]*fleetNode{}
	var names []string
	for _, b := range o.Binaries {
		for i := range o.Nodes {
			n := &fleetNode{name: fmt.Sprintf("%s-%d", b.Name, i), fleet: b.Name}
			n.dir = filepath.Join(o.Dir, "nodes", n.name)
			nodes = append(nodes, n)
			byFleet[b.Name] = append(byFleet[b.Name], n)
			names = append(names, n.name)
		}
	}
	c, err := setupFleetCluster(ctx, o, names, log)
	if err != nil {
		return err
	}
	defer c.stop()
	log.WithField("pid", c.api.pid()).Info("kube-apiserver ready")
	if err := setupFleetAPI(ctx, c.admin); err != nil {
		return err
	}
	var ctlManifests []ctlManifest
	if o.Controller != "" {
		if ctlManifests, err = readCtlManifests(o.ControllerManifests); err != nil {
			return err
		}
		if err := applyCtlManifests(ctx, c, ctlManifests); err != nil {
			return err
		}
		log.WithField("dir", o.ControllerManifests).Info("controller's manifests applied (but the Deployment)")
	}
	t0 := time.Now()
	if err := runParallel(nodes, 8, func(n *fleetNode) error { return makeNodeObjects(ctx, c.admin, n, o.Pods) }); err != nil {
		return err
	}
	log.WithField("took", time.Since(t0).Round(time.Second)).WithField("pods", len(nodes)*o.Pods).Info("nodes and pods made")
	proxies := map[string]*countingProxy{}
	for _, b := range o.Binaries {
		p, err := startCountingProxy(o.APIAddr)
		if err != nil {
			return err
		}
		proxies[b.Name] = p
	}
	defer func() {
		for _, p := range proxies {
			p.close()
		}
	}()
	defer func() {
		_ = runParallel(nodes, 16, func(n *fleetNode) error { n.stop(log); return nil })
	}()

	var watch *nodeWatch
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	if o.Controller != "" {
		if watch, err = startNodeWatch(wctx, c.admin); err != nil {
			return err
		}
	}

	// phases: each starts where the previous ended
	var phases []fleetPhase
	mark := time.Now()
	var ctls []*fleetCtl
	defer func() {
		for _, r := range ctls {
			r.stop()
		}
	}()
	if o.Controller != "" {
		// before the nodes, as in a cluster where it already runs: ctl-0
		// first, so that it takes the Lease
		for i := range 2 {
			r, err := startFleetCtl(ctx, c, ctlManifests, o.Controller, fmt.Sprintf("ctl-%d", i), ctlSourceIPs[i], log)
			if err != nil {
				return err
			}
			ctls = append(ctls, r)
			if err := r.waitReady(ctx); err != nil {
				return err
			}
		}
	}
	cpu0, err := benchutil.ReadProcStats(c.api.pid())
	if err != nil {
		return err
	}
	endPhase := func(name string, back time.Time, cpuBefore time.Duration) error {
		st, err := benchutil.ReadProcStats(c.api.pid())
		if err != nil {
			return err
		}
		p := fleetPhase{Name: name, Start: mark, End: time.Now(), Back: back, CPUSeconds: (cpuBefore + st.CPU - cpu0.CPU).Seconds(), Bytes: map[string]byteCount{}}
		for f, px := range proxies {
			b := px.bytes()
			p.Bytes[f] = b
		}
		// each replica's own proxy, by its name
		for _, r := range ctls {
			p.Bytes[r.name] = r.proxy.bytes()
		}
		phases = append(phases, p)
		mark, cpu0 = p.End, st
		log.WithFields(logrus.Fields{"phase": name, "took": p.End.Sub(p.Start).Round(time.Second), "apiserver_cpu_s": fmt.Sprintf("%.1f", p.CPUSeconds)}).Info("phase done")
		return nil
	}

	binOf := map[string]string{}
	for _, b := range o.Binaries {
		binOf[b.Name] = b.Path
	}
	if err := runParallel(nodes, 4, func(n *fleetNode) error {
		if err := os.MkdirAll(n.dir, 0o750); err != nil {
			return err
		}
		return startFleetNode(n, binOf[n.fleet], proxies[n.fleet].addr(), filepath.Join(c.pki, "ca.crt"), c.tokens[n.name], log.WithField("node", n.name))
	}); err != nil {
		return err
	}
	sampler := startFleetSampler(ctls, nodePIDs(nodes), log)
	defer sampler.stop()
	if err := runParallel(nodes, len(nodes), func(n *fleetNode) error {
		if err := fakenode.WaitSynced(ctx, filepath.Join(n.dir, "admin.sock"), len(n.pods)); err != nil {
			return fmt.Errorf("node %s: %w", n.name, err)
		}
		return nil
	}); err != nil {
		return err
	}
	log.WithField("nodes", len(nodes)).WithField("took", time.Since(mark).Round(time.Second)).Info("every cri-guard synced")
	if err := benchutil.SleepCtx(ctx, o.Settle); err != nil {
		return err
	}
	if err := endPhase("start", time.Time{}, 0); err != nil {
		return err
	}

	if err := benchutil.SleepCtx(ctx, o.Quiet); err != nil {
		return err
	}
	if err := endPhase("quiet", time.Time{}, 0); err != nil {
		return err
	}

	var wave []*fleetNode
	for _, b := range o.Binaries {
		k := int(float64(o.Nodes)*o.WaveShare + 0.5)
		wave = append(wave, byFleet[b.Name][:k]...)
	}
	waveRes := make([]waveResult, len(wave))
	_ = runParallel(wave, len(wave), func(n *fleetNode) error {
		i := indexOfNode(wave, n)
		waveRes[i] = fleetWave(ctx, c.admin, n, fleetThreshold)
		if waveRes[i].Err != "" {
			log.WithField("node", n.name).Warn("wave: " + waveRes[i].Err)
		}
		return nil
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := endPhase("wave", time.Time{}, 0); err != nil {
		return err
	}
	if err := benchutil.SleepCtx(ctx, o.After); err != nil {
		return err
	}
	if err := endPhase("after", time.Time{}, 0); err != nil {
		return err
	}

	stopAt := time.Now()
	c.api.stop()
	// the stopped server's CPU since the last phase, its shutdown included
	before := c.api.cpu() - cpu0.CPU
	log.WithField("took", time.Since(stopAt).Round(100*time.Millisecond)).WithField("exit", fmt.Sprint(c.api.err)).Info("kube-apiserver stopped")
	if err := benchutil.SleepCtx(ctx, o.Down); err != nil {
		return err
	}
	if err := c.startAPI(ctx); err != nil {
		return err
	}
	back := time.Now()
	log.WithField("pid", c.api.pid()).Info("kube-apiserver ready again")
	cpu0 = benchutil.ProcStats{}
	if err := benchutil.SleepCtx(ctx, o.RestartWindow); err != nil {
		return err
	}
	if err := endPhase("restart", back, before); err != nil {
		return err
	}

	sampler.stop()
	// the children first, so that their last requests reach the audit log
	_ = runParallel(nodes, 16, func(n *fleetNode) error { n.stop(log); return nil })
	for _, r := range ctls {
		r.stop()
	}
	wcancel()
	c.stop()
	d := newRequestDedup()
	var reqs []fleetRequest
	for _, path := range c.audits {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		r, err := readAudit(f, d)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		reqs = append(reqs, r...)
	}
	markRelists(reqs)
	fleets := []string{o.Binaries[0].Name, o.Binaries[1].Name}
	res := fleetResult{Phases: diffBytes(phases), Wave: waveRes, Aggregate: aggregateFleet(reqs, phases, fleets)}
	res.RSS = aggregateRSS(sampler.samples(), phases, fleets)
	if o.Controller != "" {
		res.Options.Controller = o.Controller
		leaders := sampler.leaderSamples()
		cr := &ctlResult{Leaders: map[string][]ctlLeaderTransition{}}
		for _, r := range ctls {
			cr.Replicas = append(cr.Replicas, ctlReplica{Name: r.name, PID: r.d.pid(), JTI: r.jti, SourceIP: r.sourceIP, Args: strings.Join(r.args, " ")})
			cr.Leaders[r.name] = leaderTransitions(leaders[r.name])
		}
		cr.Phases = aggregateCtl(reqs, phases, cr.Replicas, leaders)
		cr.Episodes = taintEpisodes(watch.observations())
		cr.Latency = map[string]latencyStat{"applied": latencyOf(cr.Episodes, "applied"), "removed": latencyOf(cr.Episodes, "removed")}
		res.Controller = cr
	}
	res.Options.Old, res.Options.New = o.Binaries[0].Path, o.Binaries[1].Path
	res.Options.Nodes, res.Options.Pods = o.Nodes, o.Pods
	res.Options.Quiet, res.Options.After, res.Options.Down, res.Options.RestartWindow = o.Quiet.String(), o.After.String(), o.Down.String(), o.RestartWindow.String()
	printFleet(out, o, res)
	if o.Out != "" {
		b, err := json.MarshalIndent(res, "", " ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.Out, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func indexOfNode(ns []*fleetNode, n *fleetNode) int {
	for i, x := range ns {
		if x == n {
			return i
		}
	}
	return -1
}

// diffBytes turns the proxies' running totals at each phase's end into
// each phase's own bytes.
func diffBytes(phases []fleetPhase) []fleetPhase {
	out := make([]fleetPhase, len(phases))
	prev := map[string]byteCount{}
	for i, p := range phases {
		out[i] = p
		out[i].Bytes = map[string]byteCount{}
		for f, b := range p.Bytes {
			out[i].Bytes[f] = byteCount{In: b.In - prev[f].In, Out: b.Out - prev[f].Out}
			prev[f] = b
		}
	}
	return out
}
