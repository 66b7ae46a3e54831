// Package cluster holds cri-guard's end-to-end tests on the one-node
// Kubernetes of scripts/cluster.sh (build tag `integration`): etcd, the
// control plane and a registered kubelet whose runtime endpoint is a
// cri-guard in front of the containerd of scripts/rt.sh. The TestCluster*
// tests drive it with kubectl, as a user would, and read cri-guard's status,
// log and metrics there; they use the cluster's own cri-guard (cluster.sh up
// builds it from this checkout) and build none.
//
// They skip unless CRI_GUARD_CLUSTER names the cluster's directory (`make
// test` sets it in its cluster stage, after `scripts/cluster.sh up`), and
// CRI_GUARD_RT the harness's:
//
//	scripts/rt.sh up && scripts/cluster.sh up
//	CRI_GUARD_RT=/tmp/cri-guard-rt CRI_GUARD_CLUSTER=/tmp/cri-guard-cluster \
//	  go test -tags integration -count=1 -v ./integration/cluster/
//	scripts/cluster.sh down
//
// The TestClusterMultiNode* tests (multinode_test.go) need a cluster of
// three nodes, CRI_GUARD_CLUSTER_NODES=3 scripts/cluster.sh up, and skip on
// the one-node cluster; every other test skips on a cluster of several
// nodes.
//
// While the cluster is up the kubelet owns the harness containerd: no other
// test may use it meanwhile. What these tests share with the other
// end-to-end packages is in integration/harness.
package cluster
