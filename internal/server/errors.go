package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors a hook returns (wrapped) to pick the gRPC code the kubelet sees.
var (
	// errInvalidRequest: the request cannot be decoded or lacks required
	// fields. Mapped to codes.InvalidArgument.
	errInvalidRequest = errors.New("invalid request")
)

// Refusal is implemented by errors that refuse admission of a pod. The error's
// package need not import server: any error in the chain with this method is
// mapped to codes.ResourceExhausted with message "<reason>: <message>", the
// kubelet's form (e.g. "Evicted: The node had condition: [MemoryPressure]. ").
type Refusal interface {
	error
	AdmissionRefused() (reason, message string)
}

// toStatus is the one place where errors become gRPC statuses. Errors that
// already carry a status (the runtime's, passed through) are returned
// unchanged; nil stays nil.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		return err
	}
	var r Refusal
	switch {
	case errors.As(err, &r):
		reason, msg := r.AdmissionRefused()
		return status.Error(codes.ResourceExhausted, reason+": "+msg)
	case errors.Is(err, errInvalidRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	if st, ok := status.FromError(err); ok {
		// A wrapped runtime status: keep its code (and details), the message
		// carries the wrapping context.
		return st.Err()
	}
	return status.Error(codes.Internal, err.Error())
}
