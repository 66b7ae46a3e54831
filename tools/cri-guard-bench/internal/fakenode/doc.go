// Package fakenode is a node for a cri-guard child without kubelet or
// containerd, as the maxprocs and fleet experiments run them: a fake CRI
// runtime (CRI: cri-api's FakeRuntimeService behind gRPC) holding a ready
// sandbox per pod, a fake proc root whose MemAvailable the bench sets
// (StatsTree), Deployment-like pods bound to the node with their Running
// status and sandbox configs (Pod), the child's JSON log read as it grows
// (LogTail), and the wait for the child to have adopted them (WaitSynced).
// It measures nothing itself.
package fakenode
