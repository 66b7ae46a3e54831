package kube

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Config says how to reach the API server.
type Config struct {
	// Kubeconfig is the kubeconfig file; the kubelet's own
	// (/etc/kubernetes/kubelet.conf) is enough.
	Kubeconfig string
	// NodeName is this node's name; empty: from the kubeconfig's client
	// certificate (CN system:node:<name>), else the host name.
	NodeName string
	// Retry is the first delay before an API write is retried (doubling up
	// to 30 s); 0: 500 ms.
	Retry time.Duration
	// Timeout bounds one API read or write; 0: 10 s. It is a deadline of
	// each request, never of the HTTP client: a watch lasts as long as the
	// server lets it (5 to 10 min, said in the request).
	Timeout time.Duration
	// Heartbeat is how often the node condition is written while nothing
	// changes (with up to a fifth more, at random); 0: 5 min, the
	// kubelet's own node status report period. At least 10 s.
	Heartbeat time.Duration
	// relistWait replaces the random wait before a relist (tests).
	relistWait func(context.Context) error
}

// Observer is told of every API write and its result ("ok", "error",
// "gone"); may be nil.
type Observer interface {
	APIWrite(op, result string)
}

// nodeUserPrefix is the user name prefix of node credentials (the Node
// authorizer's system:node:<name>).
const nodeUserPrefix = "system:node:"

// scheme holds core/v1 only: cri-guard reads pods and writes pod status,
// events and node status, and the full client-go scheme would register
// every API group at start-up (memory and time for nothing).
var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
	params = runtime.NewParameterCodec(scheme)
)

func init() {
	if err := corev1.AddToScheme(scheme); err != nil {
		panic(err) // a static registration: cannot fail
	}
	metav1.AddToGroupVersion(scheme, corev1.SchemeGroupVersion)
}

// restConfig loads the kubeconfig and returns a core/v1 REST client
// configuration and the node name.
func restConfig(cfg Config) (*rest.Config, string, error) {
	if cfg.Kubeconfig == "" {
		return nil, "", errors.New("kubernetes: no kubeconfig")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return nil, "", fmt.Errorf("kubernetes: kubeconfig %q: %w", cfg.Kubeconfig, err)
	}
	node := cfg.NodeName
	if node == "" {
		node, err = nodeName(rc)
		if err != nil {
			return nil, "", err
		}
	}
	rc.UserAgent = "cri-guard"
	rc.APIPath = "/api"
	rc.GroupVersion = &corev1.SchemeGroupVersion
	rc.NegotiatedSerializer = codecs.WithoutConversion()
	// protobuf, as the kubelet speaks to the API server: core/v1 objects
	// are a third of their JSON size and cheaper to encode on both sides;
	// JSON is accepted from a server (or proxy) that answers nothing else
	rc.ContentType = runtime.ContentTypeProtobuf
	rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	// a node agent's share: a few writes per eviction, two watches; the
	// kubelet, which does far more, has 50/100
	rc.QPS, rc.Burst = 5, 10
	// no client-wide timeout: client-go makes it the HTTP client's, which
	// cuts every watch after it (restServer bounds each request instead)
	rc.Timeout = 0
	return rc, node, nil
}

// requestTimeout is Config.Timeout with its default.
func requestTimeout(cfg Config) time.Duration {
	if cfg.Timeout <= 0 {
		return 10 * time.Second
	}
	return cfg.Timeout
}

// nodeName is the node of the client certificate (CN system:node:<name>),
// as the Node authorizer reads it, else the host name in lower case (the
// kubelet's default node name).
func nodeName(rc *rest.Config) (string, error) {
	certPEM := rc.CertData
	if len(certPEM) == 0 && rc.CertFile != "" {
		b, err := os.ReadFile(rc.CertFile)
		if err != nil {
			return "", fmt.Errorf("kubernetes: client certificate: %w", err)
		}
		certPEM = b
	}
	if blk, _ := pem.Decode(certPEM); blk != nil {
		if c, err := x509.ParseCertificate(blk.Bytes); err == nil {
			if n, ok := strings.CutPrefix(c.Subject.CommonName, nodeUserPrefix); ok && n != "" {
				return n, nil
			}
		}
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("kubernetes: node name: %w", err)
	}
	return strings.ToLower(h), nil
}

// newLogEntry returns log, or a discarding entry.
func newLogEntry(log *logrus.Entry) *logrus.Entry {
	if log != nil {
		return log
	}
	l := logrus.New()
	l.SetOutput(discard{})
	return logrus.NewEntry(l)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
