package metrics

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/internal/httpserve"
)

// path is where the series are served.
const path = "/metrics"

// Handler serves the registry's series in the Prometheus formats.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(path, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
	return mux
}

// Listen opens the TCP listener for addr ("127.0.0.1:9713").
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen metrics %q: %w", addr, err)
	}
	return l, nil
}

// Serve serves h on l until ctx ends, then shuts down within a second. Each
// connection is bounded in time and their number is capped
// (httpserve.Limits: production defaults unless opts say otherwise).
func Serve(ctx context.Context, l net.Listener, h http.Handler, log *logrus.Entry, opts ...httpserve.Option) error {
	return httpserve.Serve(ctx, l, h, "metrics", log, opts...)
}
