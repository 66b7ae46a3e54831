package overhead

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
)

// results is everything the report prints.
type results struct {
	latencies             []latency
	latencyCalls          int64 // per side
	directTput            []float64
	proxies               []*proxyResult
	sandboxes, containers int
	settled               time.Duration // wait for a quiet machine before measuring
	settleBusy            float64       // CPU busy share when measuring started
}

// proxyResult is what was measured of one cri-guard under test.
type proxyResult struct {
	label            string
	pid              int // 0: CPU and memory unknown
	tput             []float64
	tputCalls        int64
	latCPU, tputCPU  time.Duration
	rssIdle, rssLoad int64 // KiB
}

// dial is Dial with the image service too, as one side of the comparison.
func dial(endpoint string) (*grpc.ClientConn, side, error) {
	conn, rt, err := benchutil.Dial(endpoint)
	if err != nil {
		return nil, side{}, err
	}
	return conn, side{rt: rt, im: runtimeapi.NewImageServiceClient(conn)}, nil
}

func benchmark(ctx context.Context, o benchOptions, log *logrus.Entry, out io.Writer) (err error) {
	workDir := o.WorkDir
	if workDir == "" {
		workDir, err = os.MkdirTemp("", "cri-guard-bench")
		if err != nil {
			return err
		}
		defer os.RemoveAll(workDir)
	}
	dconn, direct, err := dial(o.RuntimeEndpoint)
	if err != nil {
		return err
	}
	defer dconn.Close()
	direct.name = "direct"
	// containerd may be restarting (shared test machine): wait a while.
	vctx, vcancel := context.WithTimeout(ctx, 2*time.Minute)
	v, err := direct.rt.Version(vctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
	vcancel()
	if err != nil {
		return fmt.Errorf("containerd at %q: %w", o.RuntimeEndpoint, err)
	}
	if o.CleanupRun != "" {
		return errors.Join(benchutil.Cleanup(direct.rt, o.CleanupRun, log), removePodCgroups(o.CgroupRoot, o.CleanupRun))
	}
	log.WithFields(logrus.Fields{"runtime": v.RuntimeName, "runtime_version": v.RuntimeVersion}).Info("runtime reachable")

	var res results
	sides := []side{direct}
	type childSpec struct {
		label, env string
		core       bool // the proxy core alone instead of --cri-guard-binary
	}
	specs := []childSpec{{label: "cri-guard", env: o.ProxyEnv}}
	switch {
	case o.CompareEnv != "":
		specs[0].label = "A"
		specs = append(specs, childSpec{label: "B", env: o.CompareEnv})
	case o.CompareCore:
		specs[0].label = "A"
		specs = append(specs, childSpec{label: "B core", env: o.ProxyEnv, core: true})
	}
	for i, spec := range specs {
		po := o
		po.ProxyEnv = spec.env
		po.ProxyArgs = strings.ReplaceAll(o.ProxyArgs, "{i}", strconv.Itoa(i))
		if spec.core {
			po.Binary, po.ProxyArgs = "", ""
		}
		px, err := startProxy(po, filepath.Join(workDir, fmt.Sprintf("proxy%d", i)), log)
		if err != nil {
			return err
		}
		defer func() {
			if serr := px.Stop(); serr != nil {
				log.WithError(serr).Warn("stop cri-guard")
			}
		}()
		pconn, s, err := dial(px.Endpoint)
		if err != nil {
			return err
		}
		defer pconn.Close()
		s.name = spec.label
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = s.rt.Version(wctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
		wcancel()
		if err != nil {
			return fmt.Errorf("cri-guard at %q: %w", px.Endpoint, err)
		}
		sides = append(sides, s)
		label := spec.label
		if spec.env != "" {
			label += " (" + spec.env + ")"
		}
		res.proxies = append(res.proxies, &proxyResult{label: label, pid: px.PID})
	}
	time.Sleep(time.Second)
	for _, p := range res.proxies {
		ps, err := statsOf(p.pid)
		if err != nil {
			return err
		}
		p.rssIdle = ps.RSSKiB
	}

	runID := strconv.FormatInt(time.Now().Unix(), 36)
	log.WithField("run_id", runID).Info("creating workload (remove leftovers with --cleanup-run)")
	defer func() {
		cerr := benchutil.Cleanup(direct.rt, runID, log)
		if cgErr := removePodCgroups(o.CgroupRoot, runID); cgErr != nil {
			log.WithError(cgErr).Warn("remove pod cgroups")
		}
		err = errors.Join(err, cerr)
	}()
	w, err := createWorkload(ctx, direct.rt, direct.im, o, workDir, runID, log)
	if err != nil {
		return err
	}
	res.sandboxes, res.containers = len(w.sandboxIDs), w.containers
	waited, busy, err := settle(ctx, time.Second, o.SettleMax, 0.15)
	if err != nil {
		return err
	}
	log.WithFields(logrus.Fields{"waited": waited.Round(time.Second), "cpu_busy": fmt.Sprintf("%.0f%%", busy*100)}).Info("machine settled after creating the workload")
	res.settled, res.settleBusy = waited, busy

	if err := warmUp(ctx, methods(w), sides, warmUpTime); err != nil {
		return err
	}
	before := cpuOf(res.proxies)
	for _, m := range methods(w) {
		n := o.Iterations
		if m.class == "stats" {
			n = o.StatsIterations
		}
		l, err := measureLatency(ctx, m, sides, n)
		if err != nil {
			return err
		}
		res.latencies = append(res.latencies, l)
		res.latencyCalls += int64(n + warmup)
	}
	for i, c := range cpuOf(res.proxies) {
		res.proxies[i].latCPU = c - before[i]
	}
	if o.Cycles > 0 {
		l, err := measureLatency(ctx, sandboxCycle(o, runID), sides, o.Cycles)
		if err != nil {
			return err
		}
		res.latencies = append(res.latencies, l)
	}

	lc := methods(w)[3] // ListContainers
	for range o.Rounds {
		tp, _, err := throughput(ctx, lc, direct, o.Clients, o.Duration)
		if err != nil {
			return err
		}
		res.directTput = append(res.directTput, tp)
		for i, p := range res.proxies {
			before := cpuOf(res.proxies)
			tp, n, err := throughput(ctx, lc, sides[i+1], o.Clients, o.Duration)
			if err != nil {
				return err
			}
			p.tput = append(p.tput, tp)
			p.tputCalls += n
			p.tputCPU += cpuOf(res.proxies)[i] - before[i]
		}
	}
	for _, p := range res.proxies {
		ps, err := statsOf(p.pid)
		if err != nil {
			return err
		}
		p.rssLoad = ps.RSSKiB
	}
	report(out, o, res)
	return nil
}

// cpuOf returns the CPU time of every proxy (0 when its pid is unknown or
// unreadable).
func cpuOf(ps []*proxyResult) []time.Duration {
	out := make([]time.Duration, len(ps))
	for i, p := range ps {
		s, _ := statsOf(p.pid)
		out[i] = s.CPU
	}
	return out
}

func statsOf(pid int) (benchutil.ProcStats, error) {
	if pid == 0 {
		return benchutil.ProcStats{}, nil
	}
	return benchutil.ReadProcStats(pid)
}
