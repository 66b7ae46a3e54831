package runtimeproxy

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// maxListMsgSize bounds the answers of cri-guard's own list calls. The
// kubelet-facing limit (16 MiB) is containerd's and the kubelet's; a node
// whose sandboxes carry very large configs can answer more, and cri-guard's
// restore and resync must still see it (a decoded list is held only while
// it is read).
const maxListMsgSize = 128 << 20

// ListPodSandbox lists sandboxes matching filter (nil: all).
func (c *Client) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	resp, err := c.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: filter}, grpc.MaxCallRecvMsgSize(maxListMsgSize))
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes: %w", c.mapErr(err))
	}
	return resp.GetItems(), nil
}

// PodSandboxStatus returns the verbose status of one sandbox (the info map
// carries containerd's view, including the sandbox config).
func (c *Client) PodSandboxStatus(ctx context.Context, id string) (*runtimeapi.PodSandboxStatusResponse, error) {
	resp, err := c.runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		return nil, fmt.Errorf("pod sandbox status %q: %w", id, c.mapErr(err))
	}
	return resp, nil
}

// ListContainers lists containers matching filter (nil: all).
func (c *Client) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	resp, err := c.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: filter}, grpc.MaxCallRecvMsgSize(maxListMsgSize))
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", c.mapErr(err))
	}
	return resp.GetContainers(), nil
}

// ListContainerStats lists the stats of containers matching filter.
func (c *Client) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	resp, err := c.runtime.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: filter})
	if err != nil {
		return nil, fmt.Errorf("list container stats: %w", c.mapErr(err))
	}
	return resp.GetStats(), nil
}

// StopContainer stops a container, giving it timeoutSeconds before SIGKILL.
// A container that is gone (NotFound) is stopped: nil, as the kubelet takes it.
func (c *Client) StopContainer(ctx context.Context, id string, timeoutSeconds int64) error {
	if _, err := c.runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: timeoutSeconds}); err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("stop container %q: %w", id, c.mapErr(err))
	}
	return nil
}

// StopPodSandbox stops a sandbox and whatever still runs in it. A sandbox
// that is gone (NotFound) is stopped: nil, as the kubelet takes it.
func (c *Client) StopPodSandbox(ctx context.Context, id string) error {
	if _, err := c.runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("stop pod sandbox %q: %w", id, c.mapErr(err))
	}
	return nil
}
