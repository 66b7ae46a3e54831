package benchutil

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// BenchLabel marks everything the benchmark creates; its value is the run id.
const BenchLabel = "cri-guard-bench"

// Cleanup removes every container and sandbox labelled with runID. It uses a
// fresh bounded context: it runs after failures and interrupts too.
func Cleanup(rt runtimeapi.RuntimeServiceClient, runID string, log *logrus.Entry) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// containerd may be restarting (shared test machine): wait for it to
	// answer (it says "server is not initialized yet" while loading).
	for {
		_, err := rt.Version(ctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("cleanup run %q: runtime unreachable: %w", runID, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	sel := map[string]string{BenchLabel: runID}
	var firstErr error
	note := func(err error) {
		// Already gone (another test on a shared runtime removed it): fine.
		if err != nil && status.Code(err) != codes.NotFound && firstErr == nil {
			firstErr = err
		}
	}
	cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: sel}})
	note(err)
	for _, c := range cs.GetContainers() {
		if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.Id, Timeout: 0}); err != nil {
			note(fmt.Errorf("stop container %q: %w", c.Id, err))
		}
		if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.Id}); err != nil {
			note(fmt.Errorf("remove container %q: %w", c.Id, err))
		}
	}
	sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: sel}})
	note(err)
	for _, s := range sbs.GetItems() {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			note(fmt.Errorf("stop pod sandbox %q: %w", s.Id, err))
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			note(fmt.Errorf("remove pod sandbox %q: %w", s.Id, err))
		}
	}
	log.WithFields(logrus.Fields{"containers": len(cs.GetContainers()), "sandboxes": len(sbs.GetItems())}).Info("workload removed")
	return firstErr
}

// RemoveCgroupTree rmdirs a cgroup directory bottom-up (cgroup directories
// are removed with rmdir, never by deleting their files).
func RemoveCgroupTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := RemoveCgroupTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(dir); err != nil {
		return fmt.Errorf("remove cgroup %q: %w", dir, err)
	}
	return nil
}
