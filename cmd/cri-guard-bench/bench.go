package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/runtimeproxy"
)

// results is everything the report prints.
type results struct {
	latencies               []latency
	directTput, proxiedTput []float64
	proxiedCalls            int64
	latencyCPU, tputCPU     time.Duration // cri-guard CPU during each phase
	latencyCalls            int64
	rssIdle, rssLoad        int64 // KiB; 0 when unknown
	pid                     int
	sandboxes, containers   int
}

func dial(endpoint string) (*grpc.ClientConn, side, error) {
	target, err := runtimeproxy.Target(endpoint)
	if err != nil {
		return nil, side{}, err
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(runtimeproxy.DefaultMaxMsgSize)))
	if err != nil {
		return nil, side{}, fmt.Errorf("dial %q: %w", endpoint, err)
	}
	return conn, side{rt: runtimeapi.NewRuntimeServiceClient(conn), im: runtimeapi.NewImageServiceClient(conn)}, nil
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
		return errors.Join(cleanup(direct.rt, o.CleanupRun, log), removePodCgroups(o.CgroupRoot, o.CleanupRun))
	}
	log.WithFields(logrus.Fields{"runtime": v.RuntimeName, "runtime_version": v.RuntimeVersion}).Info("runtime reachable")

	px, err := startProxy(o, workDir, log)
	if err != nil {
		return err
	}
	defer func() {
		if serr := px.stop(); serr != nil {
			log.WithError(serr).Warn("stop cri-guard")
		}
	}()
	pconn, proxied, err := dial(px.endpoint)
	if err != nil {
		return err
	}
	defer pconn.Close()
	proxied.name = "cri-guard"
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = proxied.rt.Version(wctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
	wcancel()
	if err != nil {
		return fmt.Errorf("cri-guard at %q: %w", px.endpoint, err)
	}

	res := results{pid: px.pid}
	if px.pid != 0 {
		time.Sleep(time.Second)
		ps, err := readProcStats(px.pid)
		if err != nil {
			return err
		}
		res.rssIdle = ps.rssKiB
	}

	runID := strconv.FormatInt(time.Now().Unix(), 36)
	log.WithField("run_id", runID).Info("creating workload (remove leftovers with --cleanup-run)")
	defer func() {
		cerr := cleanup(direct.rt, runID, log)
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

	before, _ := statsOf(px.pid)
	for _, m := range methods(w) {
		n := o.Iterations
		if m.class == "stats" {
			n = o.StatsIterations
		}
		l, err := measureLatency(ctx, m, direct, proxied, n)
		if err != nil {
			return err
		}
		res.latencies = append(res.latencies, l)
		res.latencyCalls += int64(n + warmup)
	}
	after, _ := statsOf(px.pid)
	res.latencyCPU = after.cpu - before.cpu

	lc := methods(w)[3] // ListContainers
	for range o.Rounds {
		tp, _, err := throughput(ctx, lc, direct, o.Clients, o.Duration)
		if err != nil {
			return err
		}
		res.directTput = append(res.directTput, tp)
		before, _ := statsOf(px.pid)
		tp, n, err := throughput(ctx, lc, proxied, o.Clients, o.Duration)
		if err != nil {
			return err
		}
		after, _ := statsOf(px.pid)
		res.proxiedTput = append(res.proxiedTput, tp)
		res.proxiedCalls += n
		res.tputCPU += after.cpu - before.cpu
	}
	if px.pid != 0 {
		ps, err := readProcStats(px.pid)
		if err != nil {
			return err
		}
		res.rssLoad = ps.rssKiB
	}
	report(out, o, res)
	return nil
}

func statsOf(pid int) (procStats, error) {
	if pid == 0 {
		return procStats{}, nil
	}
	return readProcStats(pid)
}
