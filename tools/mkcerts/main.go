// Command mkcerts writes the PKI of the one-node test cluster (scripts/cluster.sh):
// a CA, the apiserver's serving certificate, one client certificate per
// component, the kubelet's serving certificate and the service-account key
// pair, all ECDSA P-256 PEM files in one directory. Existing files are kept,
// so a cluster that comes up again keeps its identities.
//
//	mkcerts -dir DIR -node NAME [-ips IP,...]
//
// Files: ca, apiserver, apiserver-kubelet-client, admin, controller-manager,
// scheduler, node (the kubelet's client: system:node:NAME in system:nodes),
// kubelet (serving) as NAME.crt + NAME.key, and sa.key + sa.pub. The serving
// certificates (apiserver, kubelet) are for loopback, and for the addresses
// -ips names too: a cluster of several nodes, each in a network namespace of
// its own, reaches the apiserver and the kubelets by their node addresses.
//
// It uses the standard library only and imports no other package of this module.
package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// validity is long enough for any test run and short enough to be obviously
// a test PKI.
const validity = 365 * 24 * time.Hour

// leaf is one certificate to issue from the CA.
type leaf struct {
	name   string // file name without extension
	cn     string
	orgs   []string
	server bool
	dns    []string
	ips    []net.IP
}

func main() {
	dir := flag.String("dir", "", "directory to write the PKI into")
	node := flag.String("node", "cri-guard-node", "the node name the kubelet registers as")
	ipList := flag.String("ips", "", "more IP addresses (comma-separated) for the apiserver's and the kubelet's serving certificates")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "mkcerts: -dir is required")
		os.Exit(2)
	}
	ips, err := parseIPs(*ipList)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkcerts:", err)
		os.Exit(2)
	}
	if err := run(*dir, *node, ips); err != nil {
		fmt.Fprintln(os.Stderr, "mkcerts:", err)
		os.Exit(1)
	}
}

// parseIPs parses a comma-separated list of IP addresses ("" is none).
func parseIPs(list string) ([]net.IP, error) {
	var ips []net.IP
	if list == "" {
		return nil, nil
	}
	for _, f := range strings.Split(list, ",") {
		ip := net.ParseIP(strings.TrimSpace(f))
		if ip == nil {
			return nil, fmt.Errorf("-ips: %q is not an IP address", f)
		}
		ips = append(ips, ip)
	}
	return ips, nil
}

func run(dir, node string, ips []net.IP) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %q: %w", dir, err)
	}
	ca, caKey, err := loadOrMakeCA(dir)
	if err != nil {
		return err
	}
	addrs := append([]net.IP{net.IPv4(127, 0, 0, 1)}, ips...)
	leaves := []leaf{
		{name: "apiserver", cn: "kube-apiserver", server: true,
			dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			ips: append(append([]net.IP{}, addrs...), net.IPv4(10, 96, 0, 1))},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}},
		{name: "admin", cn: "cri-guard-admin", orgs: []string{"system:masters"}},
		{name: "controller-manager", cn: "system:kube-controller-manager"},
		{name: "scheduler", cn: "system:kube-scheduler"},
		{name: "node", cn: "system:node:" + node, orgs: []string{"system:nodes"}},
		{name: "kubelet", cn: node, server: true, dns: []string{node, "localhost"}, ips: addrs},
	}
	for _, l := range leaves {
		if err := issue(dir, l, ca, caKey); err != nil {
			return err
		}
	}
	return serviceAccountKey(dir)
}

func loadOrMakeCA(dir string) (*x509.Certificate, crypto.Signer, error) {
	crtPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if exists(crtPath) && exists(keyPath) {
		return loadPair(crtPath, keyPath)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "cri-guard-cluster-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CA certificate: %w", err)
	}
	if err := writePair(crtPath, keyPath, der, key); err != nil {
		return nil, nil, err
	}
	crt, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return crt, key, nil
}

func issue(dir string, l leaf, ca *x509.Certificate, caKey crypto.Signer) error {
	crtPath, keyPath := filepath.Join(dir, l.name+".crt"), filepath.Join(dir, l.name+".key")
	if exists(crtPath) && exists(keyPath) {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key %q: %w", l.name, err)
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if l.server {
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: l.cn, Organization: l.orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		DNSNames:     l.dns,
		IPAddresses:  l.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("create certificate %q: %w", l.name, err)
	}
	return writePair(crtPath, keyPath, der, key)
}

// serviceAccountKey writes the key pair the apiserver signs and checks
// service-account tokens with.
func serviceAccountKey(dir string) error {
	keyPath, pubPath := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if exists(keyPath) && exists(pubPath) {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("marshal service-account public key: %w", err)
	}
	if err := writeKey(keyPath, key); err != nil {
		return err
	}
	return writePEM(pubPath, "PUBLIC KEY", pub, 0o644)
}

func writePair(crtPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	if err := writeKey(keyPath, key); err != nil {
		return err
	}
	return writePEM(crtPath, "CERTIFICATE", der, 0o644)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("marshal key %q: %w", path, err)
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	return nil
}

func loadPair(crtPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	crtPEM, err := os.ReadFile(crtPath)
	if err != nil {
		return nil, nil, fmt.Errorf("read %q: %w", crtPath, err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("read %q: %w", keyPath, err)
	}
	cb, _ := pem.Decode(crtPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("decode CA: not PEM")
	}
	crt, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parse %q: %w", crtPath, err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parse %q: %w", keyPath, err)
	}
	return crt, key, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("random serial: %v", err))
	}
	return n
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
