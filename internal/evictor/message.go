package evictor

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/cri-guard/cri-guard/internal/pressure"
)

// evictionMessage is the kubelet's message for an evicted pod.
func evictionMessage(met pressure.Met) string {
	if met.Threshold.Signal.IsPSI() {
		return fmt.Sprintf("The node was low on resource: memory. Threshold quantity: %s > %s, observed: %s. ",
			met.Threshold.Signal, met.Threshold.Value.String(), met.Observed.String())
	}
	return fmt.Sprintf("The node was low on resource: memory. Threshold quantity: %s, available: %s. ",
		thresholdQuantity(met), met.Observed.String())
}

// thresholdQuantity is the threshold as the kubelet prints it
// (evictionapi.GetThresholdQuantity): a quantity as given, a percentage
// resolved against the observed capacity, in bytes (BinarySI), e.g.
// "429496736" for 10% of 4Gi.
func thresholdQuantity(met pressure.Met) string {
	if q := met.Threshold.Value.Quantity; q != nil {
		return q.String()
	}
	return resource.NewQuantity(met.Threshold.Value.Bytes(met.Observed.Capacity), resource.BinarySI).String()
}

// ContainerMemory is one container of an evicted pod for its message: its
// memory working set and its memory request (Request nil: not known, as
// for a Burstable pod without the API; it then gets no sentence).
type ContainerMemory struct {
	Name            string
	WorkingSetBytes int64
	Request         *resource.Quantity
}

// ContainerMessage is what the kubelet's evictionMessage adds for each
// container using more memory than it requests ("Container c was using
// 120Mi, request is 0, has larger consumption of memory. "), in the order
// given; usage equal to the request is not more.
func ContainerMessage(cs []ContainerMemory) string {
	var b strings.Builder
	for _, c := range cs {
		if c.Request == nil {
			continue
		}
		usage := resource.NewQuantity(c.WorkingSetBytes, resource.BinarySI)
		if usage.Cmp(*c.Request) > 0 {
			fmt.Fprintf(&b, "Container %s was using %s, request is %s, has larger consumption of memory. ", c.Name, usage.String(), c.Request.String())
		}
	}
	return b.String()
}
