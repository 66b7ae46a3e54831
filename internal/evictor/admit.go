package evictor

import (
	"fmt"
	"strings"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// Attributes is what Admit decides on (the kubelet's PodAdmitAttributes): the pod and whether it comes from a checkpoint.
type Attributes struct {
	Pod *pod.Pod
	// Restored is true for pods replayed from checkpoints at start-up.
	Restored bool
}

// Result is Admit's answer (the kubelet's PodAdmitResult).
type Result struct {
	Admit bool
	// Reason is a short CamelCase word, "Evicted" for memory pressure.
	Reason string
	// Message is what a person reading the pod's events sees.
	Message string
}

// admitted is the result that lets the pod in.
var admitted = Result{Admit: true}

// ReasonEvicted is the kubelet's reason for refusals under pressure.
const ReasonEvicted = "Evicted"

// nodeConditionMessage is the kubelet's message for a pod refused because of
// node conditions: "The node had condition: [MemoryPressure]. ".
func nodeConditionMessage(conditions []string) string {
	return fmt.Sprintf("The node had condition: [%s]. ", strings.Join(conditions, ", "))
}

// admitUnderConditions is the eviction manager's Admit rule, taken from the
// kubelet: no conditions → admit; critical → admit; only MemoryPressure and
// not BestEffort → admit; otherwise refuse.
func admitUnderConditions(p *pod.Pod, conditions []string) Result {
	if len(conditions) == 0 {
		return admitted
	}
	if p.Critical {
		return admitted
	}
	if len(conditions) == 1 && conditions[0] == pressure.ConditionMemoryPressure {
		if p.QOS != pod.BestEffort {
			return admitted
		}
		// a BestEffort pod that tolerates the memory-pressure taint
		// (known from the API only) is admitted too
		if p.ToleratesMemoryPressure {
			return admitted
		}
	}
	return Result{Reason: ReasonEvicted, Message: nodeConditionMessage(conditions)}
}
