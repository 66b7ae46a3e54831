// Command fakenginx stands in for the nginx and httpd e2e test images.
// Env: PORT (default 80), ROLE=nginx|httpd (default nginx).
// As nginx it re-execs itself so /proc/self/cmdline reads
// "nginx: master process ..." (comm stays "nginx"), writes /var/run/nginx.pid.
package main

import (
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

const page = "<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head>" +
	"<body><h1>Welcome to nginx!</h1></body></html>\n"

func main() {
	role := os.Getenv("ROLE")
	if role == "" {
		role = "nginx"
	}
	if role == "nginx" && !strings.HasPrefix(os.Args[0], "nginx: master process") {
		exe, err := os.Executable()
		if err == nil {
			err = syscall.Exec(exe, []string{"nginx: master process " + exe + " -g daemon off;"}, os.Environ())
		}
		fmt.Fprintln(os.Stderr, "re-exec failed:", err)
	}
	port := os.Getenv("PORT")
	if port == "" {
		port = "80"
	}
	if role == "nginx" {
		_ = os.MkdirAll("/var/run", 0o755)
		_ = os.WriteFile("/var/run/nginx.pid", []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o644)
	}
	fmt.Printf("%s: listening on :%s (pid %d)\n", role, port, os.Getpid())

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGCHLD)
	go func() {
		for s := range sigs {
			if s == syscall.SIGCHLD {
				for {
					var ws syscall.WaitStatus
					if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
						break
					}
				}
				continue
			}
			os.Exit(0)
		}
	}()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Printf("%s %s %s\n", r.RemoteAddr, r.Method, r.URL.Path)
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(page))
	})
	if err := http.ListenAndServe(":"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(1)
	}
}
