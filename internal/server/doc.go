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
// those are decoded. RunPodSandbox is one call of the sync loop's
// operation (SandboxGuard.RunPodSandbox), which forwards through a function
// the hook hands in; the hook only decodes, calls and returns. Errors are
// turned into gRPC statuses in one place, toStatus, and the runtime's
// status codes are read only here and in runtimeproxy (runOutcome says
// what a forwarded RunPodSandbox's answer proves: runtimeproxy.RunOutcome).
//
// Messages are limited to 16 MiB each way, like containerd and the kubelet.
// What one client can hold is bounded (see the Default* constants): streams
// per connection, connections at once and per peer (by SO_PEERCRED, see
// listener.go), idle connections, ping rate and the handshake time, so that
// a flood on the socket cannot take cri-guard's memory or descriptors, or
// its connections, from the kubelet.
//
// The server may import runtimeproxy, pod and internal/unixsock (the socket
// rules it shares with the admin socket); it must not import the sync
// loop (it declares the small interfaces it needs) or cmd.
package server
