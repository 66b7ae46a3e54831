package race

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/config"
	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
)

// raceOptions are the settings of `cri-guard-bench race`.
type raceOptions struct {
	RuntimeEndpoint string
	Binary          string
	Memhog          string
	Image           string
	CgroupRoot      string
	WorkDir         string
	Rates           []float64
	Runs            int
	Modes           []string
	Domain          int64
	Threshold       int64
	Headroom        int64
	Bystander       int64
	RunTimeout      time.Duration
	GuardLogLevel   string
	IgnoreSIGTERM   bool
	// Scenarios are the runaway scenarios raced with every mode: one
	// runaway, four at once, one that ignores SIGTERM.
	Scenarios []string
	// SlowStateDir, when set, races every mode a second time with its
	// state dir made in this directory (a tools/slowfs mount: a slow state disk).
	SlowStateDir string
}

// raceModes are the cri-guard configurations raced, as config file lines
// added to the common ones. "default" adds nothing: the shipped defaults.
var raceModes = map[string]string{
	"default": "",
	// the kubelet's cadence: housekeeping every 10 s, nothing else
	"kubelet": "housekeepingInterval: 10s\npsiTrigger: \"\"\n" + fastPathsOff,
	// the PSI trigger alone (the previous release's default)
	"psi": "housekeepingInterval: 10s\n" + fastPathsOff,
	// each fast path alone, on the kubelet's cadence
	"memcg":    "psiTrigger: \"\"\nfastPoll: {interval: 0s, watch: 0s}\nkernelMemcgNotification: true\n",
	"fastpoll": "psiTrigger: \"\"\nkernelMemcgNotification: false\n",
}

const fastPathsOff = "kernelMemcgNotification: false\nfastPoll: {interval: 0s, watch: 0s}\n"

var defaultRaceModes = []string{"default", "kubelet", "psi", "memcg", "fastpoll"}

func parseRaceFlags(args []string, stderr io.Writer) (raceOptions, error) {
	o := raceOptions{}
	fs := flag.NewFlagSet("cri-guard-bench race", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.RuntimeEndpoint, "runtime-endpoint", config.DefaultRuntimeEndpoint, "containerd's CRI socket")
	fs.StringVar(&o.Binary, "cri-guard-binary", "bin/cri-guard", "the cri-guard binary raced")
	fs.StringVar(&o.Memhog, "memhog", "", "tools/memhog binary, mounted into the pods (required)")
	fs.StringVar(&o.Image, "image", "registry.k8s.io/e2e-test-images/busybox:1.29-2", "image of the pods' containers (must be present)")
	fs.StringVar(&o.CgroupRoot, "cgroup-parent-root", "/cri-guard-rt-pods", "the domain cgroup is <root>/race-<pid>")
	fs.StringVar(&o.WorkDir, "work-dir", "", "directory for configs, logs and sockets (default: a new temporary directory)")
	rates := fs.String("rates", "25,50,100,200,400,800,1600", "growth rates of the runaway in MB/s, comma-separated")
	fs.IntVar(&o.Runs, "runs", 3, "runs per mode and rate")
	modes := fs.String("modes", strings.Join(defaultRaceModes, ","), "cri-guard configurations raced, comma-separated")
	domain := fs.String("domain", "1Gi", "memory limit of the pods' cgroup")
	threshold := fs.String("threshold", "200Mi", "hard threshold of allocatableMemory.available (evictionHard memory.available with enforceNodeAllocatable [pods])")
	headroom := fs.String("headroom", "128Mi", "the runaway starts this far above the threshold (it prefills the rest at once)")
	bystander := fs.String("bystander", "100Mi", "memory of the BestEffort and Burstable bystanders (the critical pod has half)")
	fs.DurationVar(&o.RunTimeout, "run-timeout", 40*time.Second, "bound of one run")
	fs.StringVar(&o.GuardLogLevel, "guard-log-level", "info", "cri-guard's --log-level (its log is <work-dir>/<mode>/cri-guard.log)")
	fs.BoolVar(&o.IgnoreSIGTERM, "runaway-ignores-sigterm", false, "the runaway ignores SIGTERM (memhog -ignore-sigterm): a stop waits for the grace period, and the table's growth after the decision shows what that costs")
	scenarios := fs.String("scenarios", scenarioOne, "runaway scenarios raced with every mode, comma-separated: "+scenarioOne+" (one runaway), "+scenarioFour+" (four at once, each at the rate), "+scenarioSIGTERM+" (one that ignores SIGTERM)")
	fs.StringVar(&o.SlowStateDir, "slow-state-dir", "", "race every mode a second time, as <mode>"+slowDiskSuffix+", with cri-guard's state dir made in this directory (a slow disk: tools/slowfs), side by side with the state dir in --work-dir")
	quick := fs.Bool("quick", false, "rates 25,400,1600 and one run each (a smoke test)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if *quick {
		*rates, o.Runs = "25,400,1600", 1
	}
	for _, s := range strings.Split(*rates, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || r <= 0 {
			return o, fmt.Errorf("--rates: bad rate %q", s)
		}
		o.Rates = append(o.Rates, r)
	}
	var err error
	if o.Modes, err = ParseModes(*modes); err != nil {
		return o, err
	}
	for _, sc := range strings.Split(*scenarios, ",") {
		sc = strings.TrimSpace(sc)
		if !slices.Contains([]string{scenarioOne, scenarioFour, scenarioSIGTERM}, sc) {
			return o, fmt.Errorf("--scenarios: unknown scenario %q (known: %s, %s, %s)", sc, scenarioOne, scenarioFour, scenarioSIGTERM)
		}
		o.Scenarios = append(o.Scenarios, sc)
	}
	for _, q := range []struct {
		name string
		s    string
		v    *int64
	}{{"domain", *domain, &o.Domain}, {"threshold", *threshold, &o.Threshold}, {"headroom", *headroom, &o.Headroom}, {"bystander", *bystander, &o.Bystander}} {
		v, err := resource.ParseQuantity(q.s)
		if err != nil {
			return o, fmt.Errorf("--%s: %w", q.name, err)
		}
		*q.v = v.Value()
	}
	if o.Memhog == "" {
		return o, errors.New("--memhog is required (go build -o /tmp/memhog ./tools/memhog)")
	}
	if o.Runs < 1 || o.Threshold+o.Headroom+2*o.Bystander >= o.Domain {
		return o, errors.New("--runs must be positive and the bystanders, headroom and threshold must fit in --domain")
	}
	return o, nil
}

// ParseModes parses --modes, a comma-separated list of race modes.
func ParseModes(s string) ([]string, error) {
	var out []string
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		if _, ok := raceModes[m]; !ok {
			return nil, fmt.Errorf("--modes: unknown mode %q (known: %s)", m, strings.Join(raceModeNames(), ", "))
		}
		out = append(out, m)
	}
	return out, nil
}

func raceModeNames() []string { return slices.Sorted(maps.Keys(raceModes)) }

// role names the pods of a race.
const (
	roleRunaway    = "runaway"
	roleBestEffort = "besteffort"
	roleBurstable  = "burstable"
	roleCritical   = "critical"
)

// racePod is one pod of the race.
type racePod struct {
	role      string
	name, uid string
	parent    string // cgroup parent
	sandbox   string
	container string
	config    *runtimeapi.PodSandboxConfig
}

// race runs every mode, one cri-guard at a time, and prints the table.
func race(ctx context.Context, o raceOptions, log *logrus.Entry, out io.Writer) (err error) {
	workDir := o.WorkDir
	if workDir == "" {
		if workDir, err = os.MkdirTemp("", "cri-guard-race"); err != nil {
			return err
		}
		defer os.RemoveAll(workDir)
	}
	if o.Memhog, err = filepath.Abs(o.Memhog); err != nil {
		return err
	}
	dconn, direct, err := benchutil.Dial(o.RuntimeEndpoint)
	if err != nil {
		return err
	}
	defer dconn.Close()
	vctx, vcancel := context.WithTimeout(ctx, time.Minute)
	_, err = direct.Version(vctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
	vcancel()
	if err != nil {
		return fmt.Errorf("containerd at %q: %w", o.RuntimeEndpoint, err)
	}
	ooms, err := watchOOM()
	if err != nil {
		return err
	}
	defer ooms.close()
	runID := fmt.Sprintf("race-%d", os.Getpid())
	dom, err := NewDomain(o.CgroupRoot+"/"+runID, o.Domain)
	if err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, benchutil.Cleanup(direct, runID, log), dom.Remove())
	}()
	log.WithFields(logrus.Fields{"run": runID, "domain": dom.dir, "limit": o.Domain, "threshold": o.Threshold}).Info("race domain created")
	var (
		runs   []raceRun
		labels []string
	)
	for _, v := range raceVariants(o) {
		labels = append(labels, v.label)
		rs, err := raceMode(ctx, o, v, dom, ooms, direct, workDir, runID, log.WithField("mode", v.label))
		runs = append(runs, rs...)
		if err != nil {
			return fmt.Errorf("mode %s: %w", v.label, err)
		}
	}
	term := "exits on SIGTERM"
	if o.IgnoreSIGTERM {
		term = "ignores SIGTERM"
	}
	fmt.Fprintf(out, "race: domain %s (v2=%v) limit %s, hard threshold allocatableMemory.available < %s; bystanders %s BestEffort, %s Burstable, %s critical static; the runaway prefills to %s above the threshold, then grows at the rate; it %s\n",
		dom.Group, dom.v2, benchutil.FmtBytes(o.Domain), benchutil.FmtBytes(o.Threshold), benchutil.FmtBytes(o.Bystander), benchutil.FmtBytes(o.Bystander), benchutil.FmtBytes(o.Bystander/2), benchutil.FmtBytes(o.Headroom), term)
	fmt.Fprintf(out, "modes <mode>%s: four runaways started at once, sharing the prefill, each growing at the rate (reached: the domain's growth); won when cri-guard stopped all four. <mode>%s: the runaway ignores SIGTERM\n\n", suffixFour, suffixSIGTERM)
	if o.SlowStateDir != "" {
		fmt.Fprintf(out, "modes %s: cri-guard's state dir in %s (slow disk), the others' in %s\n\n", slowDiskSuffix, o.SlowStateDir, workDir)
	}
	printRace(out, runs, labels)
	return nil
}

// slowDiskSuffix names a mode raced with its state dir on the slow disk.
const slowDiskSuffix = "-slowdisk"

// The runaway scenarios (--scenarios) and the suffixes of their labels.
const (
	scenarioOne     = "one"
	scenarioFour    = "four"
	scenarioSIGTERM = "sigterm"
	suffixFour      = "-x4"
	suffixSIGTERM   = "-sigterm"
)

// raceVariant is one cri-guard raced: a mode's configuration with its
// state dir in the work dir or (slow) in --slow-state-dir, against a
// scenario's runaways.
type raceVariant struct {
	mode       string // the configuration (raceModes)
	label      string // the mode's name in the table, its pods' and its work dir's
	slow       bool
	runaways   int  // started at once
	ignoreTerm bool // they ignore SIGTERM
}

// raceVariants are the modes in order, each with every scenario, each
// followed by its slow-disk variant when --slow-state-dir is set.
func raceVariants(o raceOptions) []raceVariant {
	scenarios := o.Scenarios
	if len(scenarios) == 0 {
		scenarios = []string{scenarioOne}
	}
	var out []raceVariant
	for _, m := range o.Modes {
		for _, sc := range scenarios {
			v := raceVariant{mode: m, label: m, runaways: 1, ignoreTerm: o.IgnoreSIGTERM}
			switch sc {
			case scenarioFour:
				v.label, v.runaways = m+suffixFour, 4
			case scenarioSIGTERM:
				v.label, v.ignoreTerm = m+suffixSIGTERM, true
			}
			out = append(out, v)
			if o.SlowStateDir != "" {
				v.label, v.slow = v.label+slowDiskSuffix, true
				out = append(out, v)
			}
		}
	}
	return out
}

// ModeSettings is what mode (one of ParseModes's) adds to the shipped
// defaults, as config file lines ("" for "default").
func ModeSettings(mode string) string { return raceModes[mode] }

// Config is the config file of one mode, with the hard threshold of
// memory.available, its state dir and the domain as the pods cgroup.
func Config(mode string, threshold int64, stateDir string, dom *Domain) string {
	return fmt.Sprintf(`podsCgroup: %s
evictionHard: {memory.available: %q}
# the next run's pods must be admitted soon after an eviction
evictionPressureTransitionPeriod: 1s
stateDir: %s
metricsAddress: ""
adminSocket: ""
`, dom.Group, benchutil.FmtBytes(threshold), stateDir) + raceModes[mode]
}

// raceMode starts cri-guard with the mode's config, creates the bystanders
// through it and races the runaway at each rate.
func raceMode(ctx context.Context, o raceOptions, v raceVariant, dom *Domain, ooms *oomWatch, direct runtimeapi.RuntimeServiceClient, workDir, runID string, log *logrus.Entry) ([]raceRun, error) {
	mode := v.label
	dir := filepath.Join(workDir, mode)
	stateDir := filepath.Join(dir, "state")
	if v.slow {
		stateDir = filepath.Join(o.SlowStateDir, runID+"-"+mode)
		defer os.RemoveAll(stateDir)
	}
	for _, d := range []string{dir, stateDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, err
		}
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(Config(v.mode, o.Threshold, stateDir, dom)), 0o600); err != nil {
		return nil, err
	}
	p, err := benchutil.StartChild(benchutil.ChildConfig{RuntimeEndpoint: o.RuntimeEndpoint, Args: "--config " + cfgPath + " --log-level " + o.GuardLogLevel}, o.Binary, nil, dir, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := p.Stop(); err != nil {
			log.WithError(err).Warn("stop cri-guard")
		}
	}()
	gconn, guarded, err := benchutil.Dial(p.Endpoint)
	if err != nil {
		return nil, err
	}
	defer gconn.Close()
	r := &racer{o: o, mode: mode, runaways: v.runaways, ignoreTerm: v.ignoreTerm, dom: dom, direct: direct, guard: guarded, dir: dir, runID: runID,
		guardLog: filepath.Join(dir, "cri-guard.log"), ooms: ooms, log: log}
	r.killsSeen, r.gapsSeen = ooms.count()
	if err := r.waitServing(ctx); err != nil {
		return nil, err
	}
	defer r.removeAll()
	var runs []raceRun
	for _, rate := range o.Rates {
		for i := range o.Runs {
			if ctx.Err() != nil {
				return runs, ctx.Err()
			}
			run := r.run(ctx, rate)
			log.WithFields(logrus.Fields{"rate": rate, "run": i, "outcome": run.outcome, "killed": run.killed,
				"to_decision": run.toDecision, "to_stopped": run.toStopped, "peak_mib": run.peakBytes >> 20, "err": run.err}).Info("race run")
			runs = append(runs, run)
		}
	}
	return runs, nil
}

// racer runs the races of one mode.
type racer struct {
	o          raceOptions
	mode       string
	runaways   int  // started at once in each run
	ignoreTerm bool // they ignore SIGTERM
	dom        *Domain
	direct     runtimeapi.RuntimeServiceClient // containerd
	guard      runtimeapi.RuntimeServiceClient // through cri-guard
	dir, runID string
	guardLog   string
	ooms       *oomWatch
	killsSeen  int // the OOM kills seen when the last run ended
	gapsSeen   int // and the gaps in the kernel log
	log        *logrus.Entry
	bystanders []*racePod
	seq        int
}

func (r *racer) waitServing(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err := r.guard.Version(ctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("cri-guard not serving: %w", err)
	}
	return nil
}

// newPod describes a pod of role in the domain.
func (r *racer) newPod(role string) *racePod {
	r.seq++
	uid := fmt.Sprintf("%s-%s-%d", r.runID, r.mode, r.seq)
	name := fmt.Sprintf("race-%s-%d", role, r.seq)
	qos := "besteffort"
	ann := map[string]string{"kubernetes.io/config.source": "api"}
	switch role {
	case roleBurstable, roleRunaway:
		qos = "burstable"
	case roleCritical:
		qos = "burstable"
		ann["kubernetes.io/config.source"] = "file" // a static pod: critical
	}
	parent := fmt.Sprintf("%s/kubepods/%s/pod%s", r.dom.Group, qos, uid)
	logDir := filepath.Join(r.dir, "pods", uid)
	_ = os.MkdirAll(logDir, 0o750)
	return &racePod{role: role, name: name, uid: uid, parent: parent, config: &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "cri-guard-race", Uid: uid},
		LogDirectory: logDir,
		Labels:       map[string]string{benchutil.BenchLabel: r.runID, "io.kubernetes.pod.name": name},
		Annotations:  ann,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: parent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
			},
		},
	}}
}

// start creates the pod through cri-guard (retrying while admission
// refuses it under memory pressure) and starts memhog in it.
func (r *racer) start(ctx context.Context, p *racePod, args []string) error {
	if err := r.runSandbox(ctx, p); err != nil {
		return err
	}
	if err := r.createMemhog(ctx, p, args); err != nil {
		return err
	}
	if _, err := r.guard.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: p.container}); err != nil {
		return fmt.Errorf("start container in %q: %w", p.name, err)
	}
	return nil
}

// runSandbox creates the pod's sandbox through cri-guard, retrying while
// admission refuses it under memory pressure.
func (r *racer) runSandbox(ctx context.Context, p *racePod) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := r.guard.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: p.config})
		if err == nil {
			p.sandbox = resp.PodSandboxId
			break
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			return fmt.Errorf("run pod sandbox %q: %w", p.name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// createMemhog creates the pod's memhog container, not started.
func (r *racer) createMemhog(ctx context.Context, p *racePod, args []string) error {
	resp, err := r.guard.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: p.sandbox,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "memhog"},
			Image:    &runtimeapi.ImageSpec{Image: r.o.Image},
			Command:  append([]string{"/memhog"}, args...),
			LogPath:  "memhog.log",
			Labels:   map[string]string{benchutil.BenchLabel: r.runID},
			Mounts:   []*runtimeapi.Mount{{HostPath: r.o.Memhog, ContainerPath: "/memhog", Readonly: true}},
			Linux:    &runtimeapi.LinuxContainerConfig{},
		},
		SandboxConfig: p.config,
	})
	if err != nil {
		return fmt.Errorf("create container in %q: %w", p.name, err)
	}
	p.container = resp.ContainerId
	return nil
}

// remove stops and removes a pod directly in containerd.
func (r *racer) remove(p *racePod) {
	if p.sandbox == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := r.direct.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.sandbox}); err != nil {
		r.log.WithError(err).WithField("pod", p.name).Warn("stop pod sandbox")
	}
	if _, err := r.direct.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.sandbox}); err != nil {
		r.log.WithError(err).WithField("pod", p.name).Warn("remove pod sandbox")
	}
	_ = removeCgroupTreeAll(p.parent)
	p.sandbox = ""
}

func (r *racer) removeAll() {
	for _, p := range r.bystanders {
		r.remove(p)
	}
	r.bystanders = nil
}

// removeCgroupTreeAll removes a pod cgroup in every hierarchy.
func removeCgroupTreeAll(group string) error {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", group))
	if d := filepath.Join("/sys/fs/cgroup", group); fileExists(filepath.Join(d, "cgroup.procs")) {
		dirs = append(dirs, d)
	}
	var errs []error
	for _, d := range dirs {
		if fileExists(d) {
			errs = append(errs, benchutil.RemoveCgroupTree(d))
		}
	}
	return errors.Join(errs...)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// ensureBystanders (re)creates the bystanders whose sandbox is not ready
// or whose memhog exited (OOM-killed), and waits for them to be full.
func (r *racer) ensureBystanders(ctx context.Context) error {
	want := []struct {
		role string
		size int64
	}{{roleBestEffort, r.o.Bystander}, {roleBurstable, r.o.Bystander}, {roleCritical, r.o.Bystander / 2}}
	if len(r.bystanders) == 0 {
		r.bystanders = make([]*racePod, len(want))
	}
	for i, w := range want {
		p := r.bystanders[i]
		if p != nil && r.alive(ctx, p) {
			continue
		}
		if p != nil {
			r.remove(p)
		}
		p = r.newPod(w.role)
		r.bystanders[i] = p
		if err := r.start(ctx, p, []string{"-anon", "-rate", "2000", "-size", strconv.FormatInt(w.size>>20, 10)}); err != nil {
			return err
		}
	}
	// memhog fills at 2 GB/s: wait until the domain holds the bystanders
	target := r.o.Bystander * 5 / 2
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, ws, err := r.dom.workingSet()
		if err != nil {
			return err
		}
		if ws >= target*9/10 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bystanders hold %s, want %s", benchutil.FmtBytes(ws), benchutil.FmtBytes(target))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether the pod's sandbox is ready and its container runs.
func (r *racer) alive(ctx context.Context, p *racePod) bool {
	st, err := r.direct.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.sandbox})
	if err != nil || st.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		return false
	}
	cs, err := r.direct.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: p.container})
	return err == nil && cs.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING
}

// sample is one reading of the domain during a run.
type sample struct {
	at time.Time
	ws int64
}

// run races the runaways (one, or four at once) at rate MB/s each.
func (r *racer) run(ctx context.Context, rate float64) raceRun {
	res := raceRun{mode: r.mode, rate: rate, toDecision: -1, toStopped: -1}
	fail := func(err error) raceRun {
		res.outcome, res.err = outcomeError, err.Error()
		return res
	}
	if err := r.ensureBystanders(ctx); err != nil {
		return fail(err)
	}
	_, ws, err := r.dom.workingSet()
	if err != nil {
		return fail(err)
	}
	// start the runaways headroom above the threshold, sharing the prefill
	n := max(r.runaways, 1)
	prefill := max(r.o.Domain-r.o.Threshold-r.o.Headroom-ws, 0) / int64(n)
	runaways := make([]*racePod, n)
	for i := range runaways {
		runaways[i] = r.newPod(roleRunaway)
		defer r.remove(runaways[i])
	}
	oom0, err := r.oomCounts()
	if err != nil {
		return fail(err)
	}
	// kills since the last run's end: one during the set-up counts too
	kills0, gaps0 := r.killsSeen, r.gapsSeen
	defer func() { r.killsSeen, r.gapsSeen = r.ooms.count() }()
	logOffset := fileSize(r.guardLog)
	r.dom.resetPeak()
	args := []string{"-anon", "-prefill", strconv.FormatInt(prefill>>20, 10), "-rate", strconv.FormatFloat(rate, 'f', -1, 64), "-size", "0"}
	if r.ignoreTerm {
		args = append(args, "-ignore-sigterm")
	}
	if err := r.startAll(ctx, runaways, args); err != nil {
		return fail(err)
	}
	start := time.Now()
	var crossedAt, stoppedAt time.Time
	stopped := make([]bool, n)
	left := n
	var trace []sample
	var peakWS int64
	limit := r.o.Domain - r.o.Threshold // working set at which the threshold is met
	nextStatus := start
	for {
		now := time.Now()
		if now.Sub(start) > r.o.RunTimeout {
			res.outcome = outcomeTimeout
			res.err = r.timeoutState(ctx, runaways)
			break
		}
		_, ws, err := r.dom.workingSet()
		if err == nil {
			trace = append(trace, sample{now, ws})
			peakWS = max(peakWS, ws)
			if crossedAt.IsZero() && ws >= limit {
				crossedAt = now
			}
		}
		if ks, _ := r.ooms.in(kills0, gaps0, r.dom.Group); len(ks) > 0 {
			res.outcome = outcomeOOM
			break
		}
		if n, err := r.dom.oomKills(); err == nil && n > oom0[""] {
			res.outcome = outcomeOOM
			break
		}
		if now.After(nextStatus) {
			nextStatus = now.Add(10 * time.Millisecond)
			for i, p := range runaways {
				if stopped[i] {
					continue
				}
				if st, err := r.direct.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.sandbox}); err == nil &&
					st.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
					stopped[i] = true
					left--
				}
			}
			if left == 0 {
				stoppedAt = now
				res.outcome = outcomeWon
				break
			}
			if wrong := r.stoppedBystander(ctx); wrong != "" {
				res.outcome, res.killed = outcomeWrongPod, []string{wrong}
				break
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	// an OOM kill may have come between two samples, or during the stop:
	// any kill in the domain loses the run (the OOM killer acted), and the
	// kernel log says whom it took
	time.Sleep(50 * time.Millisecond)
	ks, err := r.ooms.in(kills0, gaps0, r.dom.Group)
	for _, k := range ks {
		res.outcome = outcomeOOM
		res.killed = append(res.killed, r.roleOf(k.taskMemcg, runaways)+"("+k.task+")")
	}
	if err != nil { // the follower stopped or missed records: nothing is known
		res.outcome, res.err = outcomeError, err.Error()
	}
	if oom1, err := r.oomCounts(); err == nil {
		for role, n := range oom1 {
			if role != "" && n > oom0[role] && len(ks) == 0 {
				res.killed = append(res.killed, role)
			}
		}
		if oom1[""] > oom0[""] {
			res.outcome = outcomeOOM
		}
	}
	res.peakBytes = max(r.dom.peak(), peakWS)
	res.crossed = !crossedAt.IsZero()
	res.measuredRate = growthRate(trace, limit-96<<20, limit)
	// the first decision on any runaway
	var decided time.Time
	guardLog := readFrom(r.guardLog, logOffset)
	for _, p := range runaways {
		if t, ok := decisionTime(guardLog, p.name); ok && (decided.IsZero() || t.Before(decided)) {
			decided = t
		}
	}
	if res.crossed {
		if !decided.IsZero() {
			// 0 when cri-guard's own sample saw the crossing before the
			// bench's did (the bench samples between its status calls)
			res.toDecision = max(decided.Sub(crossedAt), 0)
		}
		if !stoppedAt.IsZero() {
			res.toStopped = stoppedAt.Sub(crossedAt)
		}
	}
	if !decided.IsZero() {
		var atDecision int64
		for _, s := range trace {
			if !s.at.After(decided) {
				atDecision = s.ws
			}
		}
		if atDecision > 0 {
			res.grewBytes = max(peakWS-atDecision, 0)
		}
	}
	return res
}

// startAll starts the runaways as nearly at once as the runtime allows:
// every sandbox first, then their memhogs one right after the other.
func (r *racer) startAll(ctx context.Context, ps []*racePod, args []string) error {
	if len(ps) == 1 {
		return r.start(ctx, ps[0], args)
	}
	for _, p := range ps {
		if err := r.runSandbox(ctx, p); err != nil {
			return err
		}
	}
	for _, p := range ps {
		if err := r.createMemhog(ctx, p, args); err != nil {
			return err
		}
	}
	for _, p := range ps {
		if _, err := r.guard.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: p.container}); err != nil {
			return fmt.Errorf("start container in %q: %w", p.name, err)
		}
	}
	return nil
}

// timeoutState says where a run that timed out stood: the domain's usage
// and the runaways' sandbox and container states.
func (r *racer) timeoutState(ctx context.Context, ps []*racePod) string {
	usage, ws, err := r.dom.workingSet()
	if err != nil {
		return fmt.Sprintf("timed out; domain: %v", err)
	}
	var states []string
	for _, p := range ps {
		sb, cs := "?", "?"
		if st, err := r.direct.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.sandbox}); err == nil {
			sb = st.GetStatus().GetState().String()
		}
		if st, err := r.direct.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: p.container}); err == nil {
			cs = st.GetStatus().GetState().String()
		}
		states = append(states, "sandbox "+sb+", container "+cs)
	}
	return fmt.Sprintf("timed out: domain usage %s, working set %s; runaways: %s", benchutil.FmtBytes(usage), benchutil.FmtBytes(ws), strings.Join(states, "; "))
}

// growthRate is the rate in MB/s at which the working set grew from the
// first sample at or above lo to the first at or above hi (or the last
// sample): what the runaway reached, which on a busy machine can be less
// than it was asked for. 0 when the trace does not span the window.
func growthRate(trace []sample, lo, hi int64) float64 {
	var a, b *sample
	for i := range trace {
		s := &trace[i]
		if a == nil && s.ws >= lo {
			a = s
		}
		if a != nil {
			b = s
			if s.ws >= hi {
				break
			}
		}
	}
	if a == nil || b == a || !b.at.After(a.at) {
		return 0
	}
	return float64(b.ws-a.ws) / 1e6 / b.at.Sub(a.at).Seconds()
}

// roleOf names the pod whose cgroup holds the cgroup path, by its UID in
// the path: a runaway, a bystander, or "other".
func (r *racer) roleOf(cgroup string, runaways []*racePod) string {
	for _, q := range append(slices.Clone(runaways), r.bystanders...) {
		if q != nil && (cgroup == q.parent || strings.HasPrefix(cgroup, q.parent+"/")) {
			return q.role
		}
	}
	return "other"
}

// oomCounts returns the OOM kill counts of the domain ("") and of each
// pod's cgroup by role (summed), which tells whom the OOM killer took.
func (r *racer) oomCounts() (map[string]int64, error) {
	out := map[string]int64{}
	n, err := r.dom.oomKills()
	if err != nil {
		return nil, err
	}
	out[""] = n
	root := r.dom.root
	buf := make([]byte, 4096)
	for _, role := range []string{roleRunaway, roleBestEffort, roleBurstable, roleCritical} {
		for _, p := range r.podsOf(role) {
			if v, err := oomKillsIn(filepath.Join(root, p.parent), r.dom.v2, buf); err == nil {
				out[role] += v
			}
		}
	}
	return out, nil
}

// podsOf lists the pods of role: the bystanders, or every runaway cgroup
// of this mode still present.
func (r *racer) podsOf(role string) []*racePod {
	if role != roleRunaway {
		var ps []*racePod
		for _, p := range r.bystanders {
			if p != nil && p.role == role {
				ps = append(ps, p)
			}
		}
		return ps
	}
	root := r.dom.root
	dirs, _ := filepath.Glob(filepath.Join(root, r.dom.Group, "kubepods", "burstable", "pod"+r.runID+"-"+r.mode+"-*"))
	var ps []*racePod
	for _, d := range dirs {
		rel := strings.TrimPrefix(d, root)
		isBystander := false
		for _, b := range r.bystanders {
			if b != nil && b.parent == rel {
				isBystander = true
			}
		}
		if !isBystander {
			ps = append(ps, &racePod{role: roleRunaway, parent: rel})
		}
	}
	return ps
}

// stoppedBystander returns the role of a bystander whose sandbox is no
// longer ready (cri-guard stopped the wrong pod), or "".
func (r *racer) stoppedBystander(ctx context.Context) string {
	for _, p := range r.bystanders {
		st, err := r.direct.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.sandbox})
		if err == nil && st.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
			return p.role
		}
	}
	return ""
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

func readFrom(path string, off int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

var logTimeRE = regexp.MustCompile(`time="([^"]+)"`)

// decisionTime finds cri-guard's "evicting pod" line for the pod name in a
// text log and returns its time.
func decisionTime(log, podName string) (time.Time, bool) {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `msg="evicting pod"`) || !strings.Contains(line+" ", " pod="+podName+" ") {
			continue
		}
		m := logTimeRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if t, err := time.Parse("2006-01-02T15:04:05.000Z07:00", m[1]); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// Main is `cri-guard-bench race`; it returns the exit code.
func Main(args []string) int { return benchutil.Subcommand("race", args, parseRaceFlags, race) }
