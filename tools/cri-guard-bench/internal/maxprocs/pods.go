package maxprocs

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/fakenode"
)

// maxprocsNamespace holds the maxprocs pods.
const maxprocsNamespace = "cri-guard-maxprocs"

// benchPod is the i-th pod of the maxprocs run, bound to node.
func benchPod(i int, node string) *corev1.Pod {
	return fakenode.Pod(fmt.Sprintf("maxprocs-%04d", i), maxprocsNamespace, i, node)
}
