package server

import "time"

// Observer is told the outcome of every call the server handles, forwarded
// or hooked (metrics). It is called on the call's goroutine after the call
// has ended, so it must be cheap and safe for concurrent use.
type Observer interface {
	// Observe gets the full method name ("/runtime.v1.RuntimeService/Version"),
	// how long the call took and the error returned to the kubelet (nil on
	// success; a gRPC status error otherwise).
	Observe(method string, d time.Duration, err error)
}
