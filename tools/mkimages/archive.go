package main

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// blob is one content-addressed piece of an image.
type blob struct {
	digest v1.Hash
	data   []byte
}

// blobs returns the layers, config and manifest of img, manifest last.
func blobs(img v1.Image) ([]blob, v1.Descriptor, error) {
	var out []blob
	layers, err := img.Layers()
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("list layers: %w", err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, v1.Descriptor{}, fmt.Errorf("layer digest: %w", err)
		}
		rc, err := l.Compressed()
		if err != nil {
			return nil, v1.Descriptor{}, fmt.Errorf("layer %q: %w", d, err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, v1.Descriptor{}, fmt.Errorf("layer %q: %w", d, err)
		}
		out = append(out, blob{d, data})
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("config: %w", err)
	}
	cd, err := img.ConfigName()
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("config digest: %w", err)
	}
	out = append(out, blob{cd, cfg})
	raw, err := img.RawManifest()
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("manifest: %w", err)
	}
	md, err := img.Digest()
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("manifest digest: %w", err)
	}
	out = append(out, blob{md, raw})
	desc := v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: md, Size: int64(len(raw))}
	return out, desc, nil
}

// writeArchive writes an image (its blobs, manifest descriptor desc) as an
// OCI image-layout tar at path whose index has one descriptor per name.
func writeArchive(path string, bs []blob, desc v1.Descriptor, names []string) error {
	index := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for _, n := range names {
		d := desc
		d.Platform = &v1.Platform{Architecture: "amd64", OS: "linux"}
		d.Annotations = map[string]string{
			"io.containerd.image.name":          n,
			"org.opencontainers.image.ref.name": n,
		}
		index.Manifests = append(index.Manifests, d)
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return fmt.Errorf("index of %q: %w", path, err)
	}
	bs = append([]blob(nil), bs...)
	sort.Slice(bs, func(i, j int) bool { return bs[i].digest.Hex < bs[j].digest.Hex })

	tmp, err := os.CreateTemp(filepath.Dir(path), ".mkimages-*")
	if err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	tw := tar.NewWriter(tmp)
	put := func(name string, data []byte) error {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	seen := map[v1.Hash]bool{}
	for _, b := range bs {
		if seen[b.digest] {
			continue
		}
		seen[b.digest] = true
		if err := put("blobs/"+b.digest.Algorithm+"/"+b.digest.Hex, b.data); err != nil {
			return fmt.Errorf("write %q: %w", path, err)
		}
	}
	if err := put("index.json", indexJSON); err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	return nil
}
