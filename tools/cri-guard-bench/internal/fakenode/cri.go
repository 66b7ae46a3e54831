package fakenode

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sync"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
)

// CRI is a runtime for a child cri-guard to forward to: the cri-api
// FakeRuntimeService behind a real gRPC server on a unix socket, answering
// what cri-guard's sync loop asks (listings, the verbose sandbox status that
// adoption reads, container and sandbox stops, an event stream that stays
// open). What is measured is cri-guard's work, not containerd's.
type CRI struct {
	srv *grpc.Server
}

// criServer answers the runtime service's calls.
type criServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	f *apitest.FakeRuntimeService

	mu      sync.Mutex
	configs map[string]*runtimeapi.PodSandboxConfig // by sandbox id
}

// StartCRI serves a fake runtime on path with a ready sandbox for
// each config.
func StartCRI(path string, sandboxes []*runtimeapi.PodSandboxConfig) (*CRI, error) {
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen fake runtime %q: %w", path, err)
	}
	s := &criServer{f: apitest.NewFakeRuntimeService(), configs: map[string]*runtimeapi.PodSandboxConfig{}}
	for _, c := range sandboxes {
		id, err := s.f.RunPodSandbox(context.Background(), c, "")
		if err != nil {
			l.Close()
			return nil, err
		}
		s.configs[id] = c
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, s)
	go func() { _ = srv.Serve(l) }()
	return &CRI{srv: srv}, nil
}

// Stop stops serving and closes the socket.
func (c *CRI) Stop() { c.srv.Stop() }

func (s *criServer) Version(ctx context.Context, r *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return s.f.Version(ctx, r.GetVersion())
}

func (s *criServer) Status(ctx context.Context, r *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return s.f.Status(ctx, r.GetVerbose())
}

func (s *criServer) ListPodSandbox(ctx context.Context, r *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	items, err := s.f.ListPodSandbox(ctx, r.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxResponse{Items: items}, nil
}

// PodSandboxStatus answers as containerd does with verbose set: the
// sandbox's own config in the "info" JSON, from which adoption derives QoS.
func (s *criServer) PodSandboxStatus(ctx context.Context, r *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	resp, err := s.f.PodSandboxStatus(ctx, r.GetPodSandboxId(), r.GetVerbose())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	c := s.configs[r.GetPodSandboxId()]
	s.mu.Unlock()
	if c != nil {
		b, err := json.Marshal(map[string]any{"config": c})
		if err != nil {
			return nil, err
		}
		resp.Info = map[string]string{"info": string(b)}
	}
	return resp, nil
}

func (s *criServer) StopPodSandbox(ctx context.Context, r *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	return &runtimeapi.StopPodSandboxResponse{}, s.f.StopPodSandbox(ctx, r.GetPodSandboxId())
}

func (s *criServer) ListContainers(ctx context.Context, r *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	items, err := s.f.ListContainers(ctx, r.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListContainersResponse{Containers: items}, nil
}

func (s *criServer) StopContainer(ctx context.Context, r *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	return &runtimeapi.StopContainerResponse{}, s.f.StopContainer(ctx, r.GetContainerId(), r.GetTimeout())
}

// ListContainerStats: no containers, no stats.
func (s *criServer) ListContainerStats(context.Context, *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	return &runtimeapi.ListContainerStatsResponse{}, nil
}

// GetContainerEvents stays open without events, as containerd's does on a
// quiet node.
func (s *criServer) GetContainerEvents(_ *runtimeapi.GetEventsRequest, st grpc.ServerStreamingServer[runtimeapi.ContainerEventResponse]) error {
	<-st.Context().Done()
	return nil
}
