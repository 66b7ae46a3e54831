package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
)

// errNotRunning is returned by Fetch when no cri-guard answers on the socket.
var errNotRunning = errors.New("is cri-guard running?")

// Fetch gets the status document from the admin socket at path. When the
// socket is missing or nobody listens on it the error wraps errNotRunning
// and says so: "is cri-guard running? no admin socket at /run/...".
func Fetch(ctx context.Context, path string) (Status, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return Status{}, fmt.Errorf("%w no admin socket at %s", errNotRunning, path)
	}
	body, err := get(ctx, path, statusPath)
	if err != nil {
		return Status{}, err
	}
	var s Status
	if err := json.Unmarshal(body, &s); err != nil {
		return Status{}, fmt.Errorf("decode status from %s: %w", path, err)
	}
	return s, nil
}

// FetchRaw returns the status document as the server sent it (JSON).
func FetchRaw(ctx context.Context, path string) ([]byte, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w no admin socket at %s", errNotRunning, path)
	}
	return get(ctx, path, statusPath)
}

func get(ctx context.Context, socket, p string) ([]byte, error) {
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://cri-guard"+p, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w nothing listens on the admin socket at %s", errNotRunning, socket)
		}
		return nil, fmt.Errorf("get %s from %s: %w", p, socket, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("get %s from %s: %w", p, socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %s from %s: %s", p, socket, resp.Status)
	}
	return body, nil
}
