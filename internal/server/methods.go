package server

import (
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// unaryMethods returns the full names of the unary CRI methods this build
// knows, from the generated service descriptors. They take the one-message
// fast path; everything else is pumped as a stream.
func unaryMethods() map[string]bool {
	m := map[string]bool{}
	for _, sd := range []*grpc.ServiceDesc{&runtimeapi.RuntimeService_ServiceDesc, &runtimeapi.ImageService_ServiceDesc} {
		for _, md := range sd.Methods {
			m["/"+sd.ServiceName+"/"+md.MethodName] = true
		}
	}
	return m
}
