// Package runtimeproxy owns cri-guard's connection to the container runtime
// (containerd's CRI socket).
//
// It dials the runtime endpoint with grpc.NewClient over a unix socket and lets
// gRPC reconnect by itself with a short backoff, so that calls succeed again
// shortly after containerd restarts. Calls made while the runtime is down fail
// fast with codes.Unavailable and a message naming the endpoint.
//
// Two kinds of calls are offered:
//
//   - raw forwarding (Invoke, NewStream) of any method with a pass-through codec:
//     request and response bytes are never decoded. The server package uses it
//     for every CRI method it does not intercept.
//   - typed helpers for the few calls cri-guard itself makes (ListPodSandbox,
//     PodSandboxStatus, ListContainers, StopContainer, StopPodSandbox). The
//     runtime's status codes are read here and in server only: a stop of a
//     sandbox or container that is gone (NotFound) is a success, and an
//     event subscription says ErrNoEvents when the runtime has no stream.
//
// RunOutcome is what a forwarded RunPodSandbox proves of the attempt's
// sandbox (created, reserved by another call, not created, maybe
// created): the server classifies the runtime's answer into it, the sync
// loop settles its record by it.
//
// Container events come through an EventHub: one runtime stream shared by
// every subscriber (containerd 1.7 gives each event to one stream only).
//
// Message size limits match containerd's and the kubelet's: 16 MiB each way
// (DefaultMaxMsgSize).
//
// This package must not import any other cri-guard package.
package runtimeproxy
