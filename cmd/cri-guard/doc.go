// Command cri-guard is the CRI proxy daemon: it listens where the kubelet's
// --container-runtime-endpoint points and forwards every CRI call to
// containerd.
//
//	cri-guard [--listen PATH] [--runtime-endpoint PATH] [--log-level L] [--log-format text|json]
//	cri-guard version
//
// main parses the command line and builds the logger; run (run.go) wires the
// components. This package may import every cri-guard package; none may
// import it.
package main
