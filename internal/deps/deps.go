package deps
import (
 _ "google.golang.org/grpc"
 _ "k8s.io/cri-api/pkg/apis/runtime/v1"
 _ "k8s.io/cri-api/pkg/apis/testing"
 _ "github.com/sirupsen/logrus"
 _ "github.com/containerd/cgroups/v3/cgroup2"
 _ "github.com/containerd/cgroups/v3/cgroup1"
 _ "k8s.io/apimachinery/pkg/api/resource"
 _ "sigs.k8s.io/yaml"
 _ "github.com/coreos/go-systemd/v22/daemon"
 _ "github.com/prometheus/client_golang/prometheus"
 _ "github.com/prometheus/client_golang/prometheus/promhttp"
 _ "github.com/google/go-containerregistry/pkg/v1/layout"
 _ "github.com/google/go-containerregistry/pkg/v1/mutate"
 _ "golang.org/x/sys/unix"
)
