// Command cri-guard-controller is cri-guard's cluster-side taint
// controller: it runs as a Deployment (contrib/controller/) and keeps the
// taint cri-guard.io/memory-pressure on exactly the Nodes whose
// CriGuardMemoryPressure condition is True, so that no identity able to
// patch Nodes sits on a node.
//
//	cri-guard-controller [--kubeconfig FILE] [--effect NoSchedule|PreferNoSchedule|NoExecute]
//	                     [--stale-after 15m] [--workers 2] [--metrics-address :9714]
//	                     [--leader-elect-namespace kube-system] [--leader-elect-name cri-guard-controller]
//	                     [--leader-elect-lease-duration 15s] [--leader-elect-renew-deadline 10s]
//	                     [--leader-elect-retry-period 2s] [--kube-api-qps 20] [--kube-api-burst 30]
//	                     [--log-level info] [--log-format text|json]
//
// main parses the flags, builds the logger and the client, serves
// /metrics, /healthz and /readyz, and runs the controller package under
// leader election until SIGTERM. It may import every cri-guard package the
// controller needs; none may import it.
package main
