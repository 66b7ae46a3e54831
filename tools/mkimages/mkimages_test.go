package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// fakeBusybox writes a script that answers --list-full like busybox does.
func fakeBusybox(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "busybox")
	script := "#!/bin/sh\n[ \"$1\" = --list-full ] && printf 'bin/busybox\\nbin/sh\\nbin/ls\\nusr/bin/wget\\n'\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func fakeInputs(t *testing.T) inputs {
	t.Helper()
	dir := t.TempDir()
	in := inputs{busybox: fakeBusybox(t)}
	in.pause, in.nnp, in.fakenginx = filepath.Join(dir, "pause"), filepath.Join(dir, "nnp"), filepath.Join(dir, "fakenginx")
	for _, f := range []string{in.pause, in.nnp, in.fakenginx} {
		if err := os.WriteFile(f, []byte("binary "+filepath.Base(f)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return in
}

type entry struct {
	typ      byte
	mode     int64
	linkname string
	body     string
}

func layerEntries(t *testing.T, l v1.Layer) map[string]entry {
	t.Helper()
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string]entry{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.ModTime.Unix() != 0 {
			t.Errorf("%s: mtime %v, want 0", h.Name, h.ModTime)
		}
		if _, dup := out[h.Name]; dup {
			t.Errorf("%s: duplicate entry", h.Name)
		}
		body, _ := io.ReadAll(tr)
		out[h.Name] = entry{typ: h.Typeflag, mode: h.Mode, linkname: h.Linkname, body: string(body)}
	}
}

func TestBusyboxLayer(t *testing.T) {
	bb, err := loadBusybox(fakeBusybox(t))
	if err != nil {
		t.Fatal(err)
	}
	lb := bb.layer("extra:x:7:7::/:/bin/sh\n", "")
	l, err := lb.layer()
	if err != nil {
		t.Fatal(err)
	}
	got := layerEntries(t, l)
	tests := []struct {
		name string
		path string
		want entry
	}{
		{"busybox itself", "bin/busybox", entry{typ: tar.TypeReg, mode: 0o755}},
		{"shell is a hard link", "bin/sh", entry{typ: tar.TypeLink, mode: 0o755, linkname: "bin/busybox"}},
		{"applet in usr/bin", "usr/bin/wget", entry{typ: tar.TypeLink, mode: 0o755, linkname: "bin/busybox"}},
		{"sticky tmp", "tmp/", entry{typ: tar.TypeDir, mode: 0o1777}},
		{"private root home", "root/", entry{typ: tar.TypeDir, mode: 0o700}},
		{"ipcs script", "usr/bin/ipcs", entry{typ: tar.TypeReg, mode: 0o755, body: ipcsShell}},
		{"passwd with extra user", "etc/passwd", entry{typ: tar.TypeReg, mode: 0o644, body: basePasswd + "extra:x:7:7::/:/bin/sh\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, ok := got[tt.path]
			if !ok {
				t.Fatalf("no entry %s", tt.path)
			}
			if tt.path == "bin/busybox" {
				e.body = ""
			}
			if e != tt.want {
				t.Fatalf("%s = %+v, want %+v", tt.path, e, tt.want)
			}
		})
	}
	if _, ok := got["bin/busybox"]; ok && got["bin/busybox"].body == "" {
		t.Error("bin/busybox is empty")
	}
}

func TestCatalogDeterministic(t *testing.T) {
	in := fakeInputs(t)
	digests := func() map[string]string {
		images, err := catalog(in)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, im := range images {
			d, err := im.img.Digest()
			if err != nil {
				t.Fatal(err)
			}
			out[im.file] = d.String()
		}
		return out
	}
	a, b := digests(), digests()
	if len(a) < 10 {
		t.Fatalf("catalog has %d images, want the critest set", len(a))
	}
	seen := map[string]string{}
	for file, d := range a {
		if b[file] != d {
			t.Errorf("%s: digest %s then %s: not deterministic", file, d, b[file])
		}
		if other, dup := seen[d]; dup {
			t.Errorf("%s and %s have the same digest %s: critest needs distinct images", file, other, d)
		}
		seen[d] = file
	}
}

func TestWriteArchive(t *testing.T) {
	images, err := catalog(fakeInputs(t))
	if err != nil {
		t.Fatal(err)
	}
	im := images[0]
	bs, desc, err := blobs(im.img)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), im.file+".tar")
	if err := writeArchive(path, bs, desc, im.names); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], _ = io.ReadAll(tr)
	}
	var index v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if len(index.Manifests) != len(im.names) {
		t.Fatalf("index has %d manifests, want %d", len(index.Manifests), len(im.names))
	}
	for i, m := range index.Manifests {
		if m.Annotations["io.containerd.image.name"] != im.names[i] || m.Annotations["org.opencontainers.image.ref.name"] != im.names[i] {
			t.Errorf("manifest %d annotations %v, want name %s", i, m.Annotations, im.names[i])
		}
	}
	for _, b := range bs {
		data, ok := files["blobs/sha256/"+b.digest.Hex]
		if !ok {
			t.Fatalf("blob %s missing", b.digest)
		}
		h, _, _ := v1.SHA256(bytes.NewReader(data))
		if h != b.digest {
			t.Fatalf("blob %s has digest %s", b.digest, h)
		}
	}
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", files["oci-layout"])
	}
}

// fakeRegistry is the registry v2 subset the pusher uses.
type fakeRegistry struct {
	mu        sync.Mutex
	blobs     map[string][]byte // repo@digest
	manifests map[string][]byte // repo:tag
}

func (r *fakeRegistry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := strings.TrimPrefix(req.URL.Path, "/v2/")
	switch {
	case req.Method == http.MethodHead && strings.Contains(p, "/blobs/"):
		i := strings.Index(p, "/blobs/")
		if _, ok := r.blobs[p[:i]+"@"+p[i+7:]]; ok {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusNotFound)
	case req.Method == http.MethodPost && strings.HasSuffix(p, "/blobs/uploads/"):
		w.Header().Set("Location", "/upload/"+strings.TrimSuffix(p, "/blobs/uploads/")+"?state=x")
		w.WriteHeader(http.StatusAccepted)
	case req.Method == http.MethodPut && strings.HasPrefix(req.URL.Path, "/upload/"):
		body, _ := io.ReadAll(req.Body)
		d := req.URL.Query().Get("digest")
		if h, _, _ := v1.SHA256(bytes.NewReader(body)); h.String() != d || req.URL.Query().Get("state") != "x" {
			http.Error(w, "digest mismatch", http.StatusBadRequest)
			return
		}
		r.blobs[strings.TrimPrefix(req.URL.Path, "/upload/")+"@"+d] = body
		w.WriteHeader(http.StatusCreated)
	case req.Method == http.MethodPut && strings.Contains(p, "/manifests/"):
		body, _ := io.ReadAll(req.Body)
		i := strings.Index(p, "/manifests/")
		r.manifests[p[:i]+":"+p[i+11:]] = body
		w.WriteHeader(http.StatusCreated)
	default:
		http.Error(w, "unexpected "+req.Method+" "+req.URL.String(), http.StatusMethodNotAllowed)
	}
}

func TestPush(t *testing.T) {
	images, err := catalog(fakeInputs(t))
	if err != nil {
		t.Fatal(err)
	}
	reg := &fakeRegistry{blobs: map[string][]byte{}, manifests: map[string][]byte{}}
	srv := httptest.NewServer(reg)
	defer srv.Close()
	p := &pusher{client: srv.Client(), registry: strings.TrimPrefix(srv.URL, "http://")}
	im := images[1] // busybox: several names
	bs, _, err := blobs(im.img)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range im.names {
		if err := p.push(t.Context(), n, bs); err != nil {
			t.Fatalf("push %s: %v", n, err)
		}
	}
	for _, n := range im.names {
		repo, tag, _ := splitRef(n)
		if !bytes.Equal(reg.manifests[repo+":"+tag], bs[len(bs)-1].data) {
			t.Errorf("manifest of %s not stored as built", n)
		}
		for _, b := range bs[:len(bs)-1] {
			if _, ok := reg.blobs[repo+"@"+b.digest.String()]; !ok {
				t.Errorf("blob %s of %s not pushed", b.digest, n)
			}
		}
	}
	if err := p.push(t.Context(), "no-slash", bs); err == nil {
		t.Error("push of a name without a registry host succeeded")
	}
}

func TestSplitRef(t *testing.T) {
	tests := []struct{ ref, repo, tag string }{
		{"registry.k8s.io/e2e-test-images/busybox:1.29-2", "e2e-test-images/busybox", "1.29-2"},
		{"docker.io/library/busybox:latest", "library/busybox", "latest"},
		{"localhost:5000/x:1", "x", "1"},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			repo, tag, err := splitRef(tt.ref)
			if err != nil || repo != tt.repo || tag != tt.tag {
				t.Fatalf("splitRef = %q, %q, %v; want %q, %q", repo, tag, err, tt.repo, tt.tag)
			}
		})
	}
}

// TestControllerImage: -controller builds the controller's image alone,
// under the name the shipped Deployment uses: its binary as the
// entrypoint, run as the Deployment's non-root uid, nothing else in it;
// mixing it with the harness's inputs is refused.
func TestControllerImage(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "cri-guard-controller")
	if err := os.WriteFile(bin, []byte("controller binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := run([]string{"-out", out, "-controller", bin}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "cri-guard-controller.tar")); err != nil {
		t.Fatal(err)
	}
	images, err := controllerImage(bin, defaultControllerName)
	if err != nil {
		t.Fatal(err)
	}
	if len(images) != 1 || len(images[0].names) != 1 || images[0].names[0] != "docker.io/library/cri-guard-controller:dev" {
		t.Fatalf("images %+v: want the one controller image", images)
	}
	cf, err := images[0].img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if ep := cf.Config.Entrypoint; len(ep) != 1 || ep[0] != "/cri-guard-controller" || cf.Config.User != "65532:65532" {
		t.Errorf("config %+v: want /cri-guard-controller run as 65532:65532", cf.Config)
	}
	layers, err := images[0].img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v: want one", len(layers), err)
	}
	got := layerEntries(t, layers[0])
	if e := got["cri-guard-controller"]; e.body != "controller binary" || e.mode != 0o755 || len(got) != 1 {
		t.Errorf("layer entries %+v: want the binary alone, mode 0755", got)
	}
	if err := run([]string{"-out", out, "-controller", bin, "-pause", bin}); err == nil || !strings.Contains(err.Error(), "alone") {
		t.Errorf("-controller with -pause: %v, want refused", err)
	}
}
