package overhead

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
)

// workload is what the benchmark created.
type workload struct {
	runID      string
	sandboxIDs []string
	containers int
}

// createWorkload creates o.Sandboxes host-network sandboxes and o.Containers
// running containers spread over them.
func createWorkload(ctx context.Context, rt runtimeapi.RuntimeServiceClient, im runtimeapi.ImageServiceClient, o benchOptions, workDir, runID string, log *logrus.Entry) (*workload, error) {
	w := &workload{runID: runID}
	if err := ensureImage(ctx, im, o.Image, log); err != nil {
		return w, err
	}
	configs := make([]*runtimeapi.PodSandboxConfig, 0, o.Sandboxes)
	for i := range o.Sandboxes {
		uid := fmt.Sprintf("%s-%04d", runID, i)
		logDir := filepath.Join(workDir, "pods", uid)
		if err := os.MkdirAll(logDir, 0o750); err != nil {
			return w, fmt.Errorf("create log dir %q: %w", logDir, err)
		}
		cfg := &runtimeapi.PodSandboxConfig{
			Metadata:     &runtimeapi.PodSandboxMetadata{Name: fmt.Sprintf("bench-%d", i), Namespace: "cri-guard-bench", Uid: uid},
			LogDirectory: logDir,
			Labels:       map[string]string{benchutil.BenchLabel: runID, "io.kubernetes.pod.name": fmt.Sprintf("bench-%d", i)},
			Annotations:  map[string]string{"kubernetes.io/config.source": "api"},
			Linux: &runtimeapi.LinuxPodSandboxConfig{
				CgroupParent: fmt.Sprintf("%s/pod%s", o.CgroupRoot, uid),
				SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
					NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
				},
			},
		}
		resp, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err != nil {
			return w, fmt.Errorf("run pod sandbox %q: %w", uid, err)
		}
		w.sandboxIDs = append(w.sandboxIDs, resp.PodSandboxId)
		configs = append(configs, cfg)
	}
	for j := range o.Containers {
		i := j % len(w.sandboxIDs)
		name := fmt.Sprintf("c%d", j)
		var resp *runtimeapi.CreateContainerResponse
		var err error
		// Other tests on a shared runtime may remove the image at any time:
		// pull it again and retry.
		for attempt := 0; ; attempt++ {
			resp, err = rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
				PodSandboxId: w.sandboxIDs[i],
				Config: &runtimeapi.ContainerConfig{
					Metadata: &runtimeapi.ContainerMetadata{Name: name},
					Image:    &runtimeapi.ImageSpec{Image: o.Image},
					LogPath:  name + ".log",
					Labels:   map[string]string{benchutil.BenchLabel: runID},
					Linux:    &runtimeapi.LinuxContainerConfig{},
				},
				SandboxConfig: configs[i],
			})
			if status.Code(err) != codes.NotFound || attempt == 3 {
				break
			}
			if err := ensureImage(ctx, im, o.Image, log); err != nil {
				return w, err
			}
		}
		if err != nil {
			return w, fmt.Errorf("create container %q in sandbox %q: %w", name, w.sandboxIDs[i], err)
		}
		if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId}); err != nil {
			return w, fmt.Errorf("start container %q: %w", resp.ContainerId, err)
		}
		w.containers++
	}
	log.WithFields(logrus.Fields{"sandboxes": len(w.sandboxIDs), "containers": w.containers}).Info("workload created")
	return w, nil
}

// removePodCgroups removes the empty pod cgroups runc created under
// cgroupRoot for this run (containerd does not remove a sandbox's parent;
// the kubelet would). Only directories named pod<runID>-* are touched.
func removePodCgroups(cgroupRoot, runID string) error {
	mounts, err := filepath.Glob("/sys/fs/cgroup/*")
	if err != nil {
		return err
	}
	var firstErr error
	for _, m := range mounts {
		dirs, _ := filepath.Glob(filepath.Join(m, cgroupRoot, "pod"+runID+"-*"))
		for _, d := range dirs {
			if err := benchutil.RemoveCgroupTree(d); err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	return firstErr
}

// ensureImage pulls image through containerd when it is not present (other
// tests on a shared runtime may have removed it).
func ensureImage(ctx context.Context, im runtimeapi.ImageServiceClient, image string, log *logrus.Entry) error {
	spec := &runtimeapi.ImageSpec{Image: image}
	st, err := im.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec})
	if err != nil {
		return fmt.Errorf("image status %q: %w", image, err)
	}
	if st.GetImage() != nil {
		return nil
	}
	log.WithField("image", image).Info("image missing, pulling")
	if _, err := im.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec}); err != nil {
		return fmt.Errorf("pull image %q: %w", image, err)
	}
	return nil
}
