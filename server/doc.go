// Package server is cri-guard's kubelet-facing gRPC server on a unix socket.
//
// Nothing is registered as a typed service. Every call goes through
// grpc.UnknownServiceHandler with a pass-through codec and is forwarded to the
// runtime as raw bytes: no decode, no re-encode, the kubelet's deadline and
// metadata kept, the runtime's status codes and messages returned unchanged.
// Known unary CRI methods take a one-message fast path; every other method
// (GetContainerEvents, Stream*, methods added to CRI later) is pumped as a
// bidirectional stream, which also works for unary methods.
//
// The few calls cri-guard intercepts (RunPodSandbox, StopPodSandbox,
// RemovePodSandbox) are registered as Hooks keyed by full method name; only
// those are decoded, by the hook itself. Errors are turned into gRPC statuses in
// one place, ToStatus.
//
// Messages are limited to 16 MiB each way, like containerd and the kubelet.
//
// The server may import runtimeproxy, pod and internal/unixsock (the socket
// rules it shares with the admin socket); it must not import the sync
// loop (it declares the small interfaces it needs) or cmd.
package server
