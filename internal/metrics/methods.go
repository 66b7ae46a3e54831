package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// otherMethod is the method label of every call whose method is not a
// runtime.v1 RuntimeService or ImageService method this build knows. The
// method name comes from the client: labelling it as sent would let any
// local client create a series per name it makes up, and keep them for
// the life of the process.
const otherMethod = "other"

// maxCode is the highest gRPC status code (Unauthenticated); the error
// counters of codes up to it are kept per method without a label lookup.
const maxCode = codes.Unauthenticated

// methodSeries are the series of one method label: its histogram child
// and its error counters by status code, each made on first use so that
// /metrics lists only methods called and codes returned.
type methodSeries struct {
	label    string
	duration atomic.Pointer[observer]
	errs     [maxCode + 1]atomic.Pointer[counter]
}

// observer and counter box prometheus interfaces for atomic.Pointer.
type (
	observer struct{ prometheus.Observer }
	counter  struct{ prometheus.Counter }
)

// criMethods returns the full names of the CRI methods this build knows
// (unary and streaming), from the generated service descriptors.
func criMethods() []string {
	var names []string
	for _, sd := range []*grpc.ServiceDesc{&runtimeapi.RuntimeService_ServiceDesc, &runtimeapi.ImageService_ServiceDesc} {
		for _, md := range sd.Methods {
			names = append(names, "/"+sd.ServiceName+"/"+md.MethodName)
		}
		for _, st := range sd.Streams {
			names = append(names, "/"+sd.ServiceName+"/"+st.StreamName)
		}
	}
	return names
}

// newMethodTable makes the series of every known method and of
// otherMethod. The map is never written after, so lookups need no lock.
func (m *Metrics) newMethodTable() {
	m.methods = map[string]*methodSeries{}
	for _, name := range criMethods() {
		m.methods[name] = &methodSeries{label: name}
	}
	m.other = &methodSeries{label: otherMethod}
}

// series returns the series of method: its own when known, otherMethod's
// otherwise.
func (m *Metrics) series(method string) *methodSeries {
	if s, ok := m.methods[method]; ok {
		return s
	}
	return m.other
}

// durationObserver returns the histogram child of s. Two racing first
// calls box the same child (WithLabelValues returns it): either box will do.
func (m *Metrics) durationObserver(s *methodSeries) prometheus.Observer {
	if o := s.duration.Load(); o != nil {
		return o.Observer
	}
	o := &observer{m.criDuration.WithLabelValues(s.label)}
	s.duration.CompareAndSwap(nil, o)
	return o.Observer
}

// errorCounter returns the error counter of s for code.
func (m *Metrics) errorCounter(s *methodSeries, code codes.Code) prometheus.Counter {
	if code > maxCode {
		// Not a code gRPC defines: only a runtime can send one, and
		// such a call is rare; no cache.
		return m.criErrors.WithLabelValues(s.label, code.String())
	}
	if c := s.errs[code].Load(); c != nil {
		return c.Counter
	}
	c := &counter{m.criErrors.WithLabelValues(s.label, code.String())}
	s.errs[code].CompareAndSwap(nil, c)
	return c.Counter
}
