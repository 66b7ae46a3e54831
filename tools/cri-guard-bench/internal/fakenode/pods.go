package fakenode

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// UpdateAnnotation is on every Pod, "0": a bench changes it to make an
// informer update (maxprocs's updater, 50 times a second by default).
const UpdateAnnotation = "cri-guard-bench/update"

// Pod is the i-th pod of a bench (i sets its app label, 50 pods a label),
// bound to node: what a Deployment's pod carries (labels, two containers with requests,
// environment, probes, a volume), Burstable, tolerating the unreachable and
// not-ready taints for good (no kubelet serves the node: the node lifecycle
// controller taints it, and the pods must stay). No owner reference: in a
// real cluster the garbage collector deletes a pod whose owner is missing.
func Pod(name, namespace string, i int, node string) *corev1.Pod {
	env := make([]corev1.EnvVar, 0, 6)
	for k := range 5 {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("SETTING_%d", k), Value: fmt.Sprintf("value-%d-%d", i, k)})
	}
	env = append(env, corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}})
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080), Scheme: corev1.URISchemeHTTP}},
		PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace,
			Labels:      map[string]string{"app": fmt.Sprintf("maxprocs-%02d", i/50), "pod-template-hash": "6d9f7c8b5", "tier": "backend"},
			Annotations: map[string]string{"kubernetes.io/config.source": "api", UpdateAnnotation: "0"},
		},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{
				{Name: "app", Image: "registry.example/app:1.2.3", Env: env,
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
						Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
					},
					ReadinessProbe: probe, LivenessProbe: probe.DeepCopy(),
					VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}},
				},
				{Name: "sidecar", Image: "registry.example/proxy:0.9",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}},
				},
			},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}}},
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			},
			TerminationGracePeriodSeconds: ptr.To[int64](30),
		},
	}
}

// RunningStatus is the status a kubelet writes for a running pod.
func RunningStatus(p *corev1.Pod, i int, start time.Time) corev1.PodStatus {
	t := metav1.NewTime(start.Truncate(time.Second))
	ip := fmt.Sprintf("10.88.%d.%d", i/250, i%250+2)
	st := corev1.PodStatus{
		Phase: corev1.PodRunning, HostIP: "192.0.2.10", HostIPs: []corev1.HostIP{{IP: "192.0.2.10"}},
		PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &t, QOSClass: corev1.PodQOSBurstable,
	}
	for _, c := range []corev1.PodConditionType{"PodReadyToStartContainers", corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: c, Status: corev1.ConditionTrue, LastTransitionTime: t})
	}
	for _, c := range p.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image + "@sha256:4f2c5d7e9a1b3c6d8e0f2a4b6c8d0e2f4a6b8c0d2e4f6a8b0c2d4e6f8a0b2c4d",
			ContainerID: fmt.Sprintf("containerd://%064x", i*2+len(c.Name)), Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}},
		})
	}
	return st
}

// SandboxConfig is the CRI sandbox of an API pod, as the kubelet makes it
// (cgroupfs driver, Burstable).
func SandboxConfig(p *corev1.Pod) *runtimeapi.PodSandboxConfig {
	uid := string(p.UID)
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: p.Name, Namespace: p.Namespace, Uid: uid},
		Labels: map[string]string{"io.kubernetes.pod.name": p.Name, "io.kubernetes.pod.namespace": p.Namespace,
			"io.kubernetes.pod.uid": uid, "app": p.Labels["app"]},
		Annotations: map[string]string{"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": "2026-01-01T00:00:00Z"},
		Linux:       &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/burstable/pod" + uid},
	}
}
