package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkimages:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mkimages", flag.ContinueOnError)
	out := fs.String("out", "", "directory for the OCI archives (<image>.tar)")
	var in inputs
	fs.StringVar(&in.pause, "pause", "", "static binary that blocks until SIGTERM (sandbox image)")
	fs.StringVar(&in.busybox, "busybox", "", "Debian's dynamic busybox binary")
	fs.StringVar(&in.nnp, "nnp", "", "static binary printing its effective uid (installed setuid root)")
	fs.StringVar(&in.fakenginx, "fakenginx", "", "static web server standing in for nginx/httpd")
	controllerBin := fs.String("controller", "", "static cri-guard-controller binary: build its image alone, instead of the harness's")
	controllerName := fs.String("controller-name", defaultControllerName, "the controller image's name")
	push := fs.String("push", "", "registry host:port (plain HTTP) to push every image name to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var images []image
	var err error
	switch {
	case *out == "":
		fs.Usage()
		return fmt.Errorf("-out is required")
	case *controllerBin != "":
		if in != (inputs{}) {
			return fmt.Errorf("-controller builds the controller image alone: drop -pause, -busybox, -nnp and -fakenginx")
		}
		images, err = controllerImage(*controllerBin, *controllerName)
	case in.pause == "" || in.busybox == "" || in.nnp == "" || in.fakenginx == "":
		fs.Usage()
		return fmt.Errorf("-pause, -busybox, -nnp and -fakenginx are required (or -controller)")
	default:
		images, err = catalog(in)
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("create %q: %w", *out, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := &pusher{client: &http.Client{Timeout: time.Minute}, registry: *push}
	// Images are independent: build, write and push them concurrently.
	errs := make([]error, len(images))
	lines := make([]string, len(images))
	var wg sync.WaitGroup
	for i, im := range images {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := filepath.Join(*out, im.file+".tar")
			bs, desc, err := blobs(im.img)
			if err != nil {
				errs[i] = fmt.Errorf("image %q: %w", im.file, err)
				return
			}
			if err := writeArchive(path, bs, desc, im.names); err != nil {
				errs[i] = err
				return
			}
			lines[i] = fmt.Sprintf("%s: %s %s", path, desc.Digest, strings.Join(im.names, " "))
			if *push == "" {
				return
			}
			for _, n := range im.names {
				if err := p.push(ctx, n, bs); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := range images {
		if errs[i] != nil {
			return errs[i]
		}
		fmt.Println(lines[i])
	}
	return nil
}
