package fakeruntime

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
)

// runtimeServer adapts FakeRuntimeService (a client-side interface) to the
// generated gRPC server interface. Methods not listed answer Unimplemented.
type runtimeServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	b *Backend
}

func (s *runtimeServer) Version(ctx context.Context, r *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return s.b.Runtime.Version(ctx, r.GetVersion())
}

func (s *runtimeServer) Status(ctx context.Context, r *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return s.b.Runtime.Status(ctx, r.GetVerbose())
}

func (s *runtimeServer) RunPodSandbox(ctx context.Context, r *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	id, err := s.b.Runtime.RunPodSandbox(ctx, r.GetConfig(), r.GetRuntimeHandler())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

func (s *runtimeServer) StopPodSandbox(ctx context.Context, r *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	return &runtimeapi.StopPodSandboxResponse{}, s.b.Runtime.StopPodSandbox(ctx, r.GetPodSandboxId())
}

func (s *runtimeServer) RemovePodSandbox(ctx context.Context, r *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	return &runtimeapi.RemovePodSandboxResponse{}, s.b.Runtime.RemovePodSandbox(ctx, r.GetPodSandboxId())
}

func (s *runtimeServer) PodSandboxStatus(ctx context.Context, r *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	return s.b.Runtime.PodSandboxStatus(ctx, r.GetPodSandboxId(), r.GetVerbose())
}

func (s *runtimeServer) ListPodSandbox(ctx context.Context, r *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	items, err := s.b.Runtime.ListPodSandbox(ctx, r.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxResponse{Items: items}, nil
}

func (s *runtimeServer) CreateContainer(ctx context.Context, r *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	id, err := s.b.Runtime.CreateContainer(ctx, r.GetPodSandboxId(), r.GetConfig(), r.GetSandboxConfig())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

func (s *runtimeServer) StartContainer(ctx context.Context, r *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	return &runtimeapi.StartContainerResponse{}, s.b.Runtime.StartContainer(ctx, r.GetContainerId())
}

func (s *runtimeServer) StopContainer(ctx context.Context, r *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	return &runtimeapi.StopContainerResponse{}, s.b.Runtime.StopContainer(ctx, r.GetContainerId(), r.GetTimeout())
}

func (s *runtimeServer) RemoveContainer(ctx context.Context, r *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	return &runtimeapi.RemoveContainerResponse{}, s.b.Runtime.RemoveContainer(ctx, r.GetContainerId())
}

func (s *runtimeServer) ListContainers(ctx context.Context, r *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	items, err := s.b.Runtime.ListContainers(ctx, r.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListContainersResponse{Containers: items}, nil
}

func (s *runtimeServer) ContainerStatus(ctx context.Context, r *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	return s.b.Runtime.ContainerStatus(ctx, r.GetContainerId(), r.GetVerbose())
}

func (s *runtimeServer) ListContainerStats(ctx context.Context, r *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	items, err := s.b.Runtime.ListContainerStats(ctx, r.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: items}, nil
}

// GetContainerEvents streams events from Backend.Events until the call ends.
func (s *runtimeServer) GetContainerEvents(_ *runtimeapi.GetEventsRequest, stream runtimeapi.RuntimeService_GetContainerEventsServer) error {
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev := <-s.b.Events:
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

type imageServer struct {
	runtimeapi.UnimplementedImageServiceServer
	f *apitest.FakeImageService
}

func (s *imageServer) ListImages(ctx context.Context, r *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	items, err := s.f.ListImages(ctx, r.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListImagesResponse{Images: items}, nil
}

func (s *imageServer) ImageStatus(ctx context.Context, r *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	return s.f.ImageStatus(ctx, r.GetImage(), r.GetVerbose())
}

func (s *imageServer) ImageFsInfo(ctx context.Context, _ *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return s.f.ImageFsInfo(ctx)
}
