package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: not PEM", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRun: every certificate chains to the CA with the usage and names its
// peer checks, and a second run keeps the files it finds.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	if err := run(dir, "n1", nil); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, filepath.Join(dir, "ca.crt")))
	tests := []struct {
		name, cn, org string
		usage         x509.ExtKeyUsage
		dns           string
		ip            net.IP
	}{
		{name: "apiserver", cn: "kube-apiserver", usage: x509.ExtKeyUsageServerAuth, dns: "localhost", ip: net.IPv4(127, 0, 0, 1)},
		{name: "kubelet", cn: "n1", usage: x509.ExtKeyUsageServerAuth, dns: "n1", ip: net.IPv4(127, 0, 0, 1)},
		{name: "node", cn: "system:node:n1", org: "system:nodes", usage: x509.ExtKeyUsageClientAuth},
		{name: "admin", cn: "cri-guard-admin", org: "system:masters", usage: x509.ExtKeyUsageClientAuth},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", org: "system:masters", usage: x509.ExtKeyUsageClientAuth},
		{name: "controller-manager", cn: "system:kube-controller-manager", usage: x509.ExtKeyUsageClientAuth},
		{name: "scheduler", cn: "system:kube-scheduler", usage: x509.ExtKeyUsageClientAuth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := readCert(t, filepath.Join(dir, tt.name+".crt"))
			if c.Subject.CommonName != tt.cn {
				t.Errorf("CN %q, want %q", c.Subject.CommonName, tt.cn)
			}
			if tt.org != "" && (len(c.Subject.Organization) != 1 || c.Subject.Organization[0] != tt.org) {
				t.Errorf("O %v, want %q", c.Subject.Organization, tt.org)
			}
			opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{tt.usage}, DNSName: tt.dns}
			if _, err := c.Verify(opts); err != nil {
				t.Errorf("verify: %v", err)
			}
			if tt.ip != nil {
				if err := c.VerifyHostname(tt.ip.String()); err != nil {
					t.Errorf("verify %s: %v", tt.ip, err)
				}
			}
		})
	}
	for _, f := range []string{"ca.key", "node.key", "sa.key"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, fi.Mode().Perm())
		}
	}

	before, err := os.ReadFile(filepath.Join(dir, "node.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := run(dir, "n1", nil); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(filepath.Join(dir, "node.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("a second run replaced node.crt")
	}
}

// TestRunIPs: -ips adds the node addresses to the serving certificates of
// the apiserver and the kubelet (loopback stays), and to no client's.
func TestRunIPs(t *testing.T) {
	dir := t.TempDir()
	ips, err := parseIPs("10.244.80.1, 10.244.80.2")
	if err != nil {
		t.Fatal(err)
	}
	if err := run(dir, "n2", ips); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"apiserver", "kubelet"} {
		c := readCert(t, filepath.Join(dir, name+".crt"))
		for _, h := range []string{"127.0.0.1", "10.244.80.1", "10.244.80.2"} {
			if err := c.VerifyHostname(h); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
	if c := readCert(t, filepath.Join(dir, "node.crt")); len(c.IPAddresses) != 0 {
		t.Errorf("node.crt (a client's) has IP addresses %v", c.IPAddresses)
	}
	if _, err := parseIPs("10.244.80.1,nope"); err == nil {
		t.Error(`parseIPs("10.244.80.1,nope"): no error`)
	}
	if ips, err := parseIPs(""); err != nil || ips != nil {
		t.Errorf(`parseIPs(""): %v, %v; want none`, ips, err)
	}
}
