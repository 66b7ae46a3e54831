// Command mkimages builds the container images of the test harness offline,
// without docker or any registry to pull from.
//
// It writes one OCI image-layout archive per image (OUT/<image>.tar, loadable
// with `ctr images import`), each holding one manifest descriptor per image name
// annotated with io.containerd.image.name and org.opencontainers.image.ref.name,
// and with -push it uploads every name to a plain-HTTP registry (registry v2 API),
// the registry host replaced by the one given. The images are what critest and
// the integration tests expect: a pause image, Debian's dynamic busybox with
// hard-linked applets, fake nginx/httpd web servers, a setuid-root nonewprivs
// helper, and critest's image-service test images. Output is deterministic
// (mtime 0, fixed order), so digests are stable from run to run.
//
// With -controller it builds the taint controller's image alone
// (OUT/cri-guard-controller.tar, named docker.io/library/cri-guard-controller:dev
// by default, the name contrib/controller/ uses): `make controller-image`.
//
// Usage:
//
//	mkimages -out DIR -pause BIN -busybox BIN -nnp BIN -fakenginx BIN [-push HOST:PORT]
//	mkimages -out DIR -controller BIN [-controller-name NAME] [-push HOST:PORT]
//
// It imports no other package of this module.
package main
