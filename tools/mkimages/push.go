package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/types"
)

// pusher uploads images to a plain-HTTP registry through the registry v2 API.
type pusher struct {
	client   *http.Client
	registry string // host:port
}

// splitRef turns "registry.k8s.io/e2e-test-images/busybox:1.29-2" into the
// repository "e2e-test-images/busybox" and the tag "1.29-2": the registry host
// is dropped, the harness registry stands in for every upstream one.
func splitRef(ref string) (repo, tag string, err error) {
	slash := strings.Index(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if slash < 0 || colon < slash {
		return "", "", fmt.Errorf("image name %q: want host/repository:tag", ref)
	}
	return ref[slash+1 : colon], ref[colon+1:], nil
}

func (p *pusher) do(ctx context.Context, method, u string, body []byte, contentType string, want int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != want {
		return nil, fmt.Errorf("%s %s: status %d: %s", method, u, resp.StatusCode, bytes.TrimSpace(msg))
	}
	return resp, nil
}

func (p *pusher) pushBlob(ctx context.Context, repo string, b blob) error {
	base := "http://" + p.registry + "/v2/" + repo
	if _, err := p.do(ctx, http.MethodHead, base+"/blobs/"+b.digest.String(), nil, "", http.StatusOK); err == nil {
		return nil // already there
	}
	resp, err := p.do(ctx, http.MethodPost, base+"/blobs/uploads/", nil, "", http.StatusAccepted)
	if err != nil {
		return err
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		return fmt.Errorf("upload location: %w", err)
	}
	loc = resp.Request.URL.ResolveReference(loc)
	q := loc.Query()
	q.Set("digest", b.digest.String())
	loc.RawQuery = q.Encode()
	_, err = p.do(ctx, http.MethodPut, loc.String(), b.data, "application/octet-stream", http.StatusCreated)
	return err
}

// push uploads an image (its blobs, manifest last, as blobs returns them)
// under ref: the blobs, then the manifest by tag.
func (p *pusher) push(ctx context.Context, ref string, bs []blob) error {
	repo, tag, err := splitRef(ref)
	if err != nil {
		return err
	}
	manifest := bs[len(bs)-1]
	for _, b := range bs[:len(bs)-1] {
		if err := p.pushBlob(ctx, repo, b); err != nil {
			return fmt.Errorf("push %q: %w", ref, err)
		}
	}
	u := "http://" + p.registry + "/v2/" + repo + "/manifests/" + tag
	if _, err := p.do(ctx, http.MethodPut, u, manifest.data, string(types.OCIManifestSchema1), http.StatusCreated); err != nil {
		return fmt.Errorf("push %q: %w", ref, err)
	}
	return nil
}
