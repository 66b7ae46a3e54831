package main

import (
	"fmt"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	e2eRepo     = "registry.k8s.io/e2e-test-images/"
	stagingRepo = "gcr.io/k8s-staging-cri-tools/"
	defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// inputs are the host binaries the images are made of.
type inputs struct {
	pause, busybox, nnp, fakenginx string
}

// image is one built image with every name it is published under.
type image struct {
	file  string // archive base name
	names []string
	img   v1.Image
}

// newImage assembles an OCI image (manifest and config media types OCI,
// creation time the epoch) from its layers and runtime config.
func newImage(cfg v1.Config, layers ...*layerBuilder) (v1.Image, error) {
	epoch := v1.Time{Time: time.Unix(0, 0).UTC()}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	adds := make([]mutate.Addendum, 0, len(layers))
	for _, lb := range layers {
		l, err := lb.layer()
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.Addendum{
			Layer:     l,
			MediaType: types.OCILayer,
			History:   v1.History{Created: epoch, CreatedBy: "mkimages"},
		})
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, fmt.Errorf("append layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created, cf.Config = "amd64", "linux", epoch, cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return img, nil
}

// catalog builds every image the harness publishes: the sandbox image, busybox
// (critest's default image), fake web servers, nonewprivs and critest's
// image-service test images.
func catalog(in inputs) ([]image, error) {
	read := func(p string) ([]byte, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read %q: %w", p, err)
		}
		return b, nil
	}
	pause, err := read(in.pause)
	if err != nil {
		return nil, err
	}
	nnp, err := read(in.nnp)
	if err != nil {
		return nil, err
	}
	web, err := read(in.fakenginx)
	if err != nil {
		return nil, err
	}
	bb, err := loadBusybox(in.busybox)
	if err != nil {
		return nil, err
	}
	env := []string{defaultPath}
	sh := v1.Config{Cmd: []string{"sh"}, Env: env}

	var out []image
	add := func(file string, names []string, cfg v1.Config, layers ...*layerBuilder) error {
		img, err := newImage(cfg, layers...)
		if err != nil {
			return fmt.Errorf("image %q: %w", file, err)
		}
		out = append(out, image{file: file, names: names, img: img})
		return nil
	}
	withFile := func(name string) *layerBuilder {
		l := bb.layer("", "")
		l.file(name, nil, 0o644)
		return l
	}

	p := newLayer()
	p.file("/pause", pause, 0o755)
	errs := []error{
		add("pause", []string{"registry.k8s.io/pause:3.9", "k8s.gcr.io/pause:3.9", "registry.k8s.io/pause:3.10"},
			v1.Config{Entrypoint: []string{"/pause"}, Env: env, User: "65535:65535"}, p),
		add("busybox", []string{e2eRepo + "busybox:1.29-2", e2eRepo + "busybox:1.36.1-1", "docker.io/library/busybox:latest"},
			sh, bb.layer("", "")),
	}
	for _, w := range []struct {
		file, exe, role, port string
		names                 []string
	}{
		{"nginx", "/usr/sbin/nginx", "nginx", "80", []string{e2eRepo + "nginx:1.14-2", e2eRepo + "nginx:1.15-4"}},
		{"hostnet-nginx", "/usr/sbin/nginx", "nginx", "12003", []string{stagingRepo + "hostnet-nginx-amd64:latest"}},
		{"httpd", "/usr/local/bin/httpd-foreground", "httpd", "80", []string{e2eRepo + "httpd:2.4.39-4"}},
	} {
		l := bb.layer("", "")
		l.file(w.exe, web, 0o755)
		l.dir("/usr/share/nginx/html", 0o755, 0, 0)
		errs = append(errs, add(w.file, w.names, v1.Config{
			Entrypoint:   []string{w.exe},
			Env:          append([]string{defaultPath}, "ROLE="+w.role, "PORT="+w.port),
			ExposedPorts: map[string]struct{}{"80/tcp": {}},
		}, l))
	}
	n := bb.layer("", "")
	n.file("/usr/local/bin/nnp", nnp, 0o4755)
	errs = append(errs, add("nonewprivs", []string{e2eRepo + "nonewprivs:1.3"},
		v1.Config{Entrypoint: []string{"/usr/local/bin/nnp"}, Env: env}, n))
	// critest image-service tests need distinct content per image.
	for _, name := range []string{"test-image-1", "test-image-2", "test-image-3", "test-image-latest", "test-image-digest"} {
		errs = append(errs, add(name, []string{stagingRepo + name + ":latest"}, sh, withFile("/"+name)))
	}
	errs = append(errs, add("test-image-tags", []string{
		stagingRepo + "test-image-tags:1", stagingRepo + "test-image-tags:2", stagingRepo + "test-image-tags:3",
	}, sh, withFile("/same-image")))
	for _, tag := range []string{"test", "all"} {
		errs = append(errs, add("test-image-tag-"+tag, []string{stagingRepo + "test-image-tag:" + tag}, sh, withFile("/"+tag)))
	}
	for _, u := range []struct{ name, user string }{
		{"test-image-user-uid", "1002"},
		{"test-image-user-username", "www-data"},
		{"test-image-user-uid-group", "1003:1004"},
		{"test-image-user-username-group", "www-data:1004"},
	} {
		cfg := sh
		cfg.User = u.user
		errs = append(errs, add(u.name, []string{stagingRepo + u.name + ":latest"}, cfg, bb.layer("", "")))
	}
	g := bb.layer("default-user:x:1000:1000::/home/default-user:/bin/sh\n",
		"default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n")
	g.dir("/home/default-user", 0o755, 1000, 1000)
	cfg := sh
	cfg.User = "1000"
	errs = append(errs, add("test-image-predefined-group", []string{stagingRepo + "test-image-predefined-group:latest"}, cfg, g))
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// defaultControllerName is the image contrib/controller/03-deployment.yaml
// names (cri-guard-controller:dev), as containerd resolves it.
const defaultControllerName = "docker.io/library/cri-guard-controller:dev"

// controllerUser is the uid and gid the controller runs as, the
// Deployment's runAsUser (distroless's nonroot): no passwd entry needed.
const controllerUser = "65532:65532"

// controllerImage is the taint controller's image: its static binary
// alone, as the entrypoint, run as controllerUser. Nothing else is in it
// (no shell, no CA bundle: the in-cluster config brings the API server's).
func controllerImage(bin, name string) ([]image, error) {
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", bin, err)
	}
	l := newLayer()
	l.file("/cri-guard-controller", b, 0o755)
	img, err := newImage(v1.Config{Entrypoint: []string{"/cri-guard-controller"}, User: controllerUser}, l)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", name, err)
	}
	return []image{{file: "cri-guard-controller", names: []string{name}, img: img}}, nil
}
