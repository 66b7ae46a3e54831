package server

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestToStatus(t *testing.T) {
	runtimeErr := status.Error(codes.NotFound, "sandbox not found")
	tests := []struct {
		name     string
		err      error
		wantCode codes.Code
		wantMsg  string
		same     bool
	}{
		{name: "nil", err: nil, wantCode: codes.OK},
		{name: "status passes unchanged", err: runtimeErr, wantCode: codes.NotFound, wantMsg: "sandbox not found", same: true},
		{name: "refusal", err: fmt.Errorf("admit: %w", refusal{"Evicted", "The node had condition: [MemoryPressure]. "}),
			wantCode: codes.ResourceExhausted, wantMsg: "Evicted: The node had condition: [MemoryPressure]. "},
		{name: "invalid", err: fmt.Errorf("decode: %w", errInvalidRequest), wantCode: codes.InvalidArgument, wantMsg: "decode: invalid request"},
		{name: "deadline", err: fmt.Errorf("x: %w", context.DeadlineExceeded), wantCode: codes.DeadlineExceeded, wantMsg: "x: context deadline exceeded"},
		{name: "canceled", err: context.Canceled, wantCode: codes.Canceled, wantMsg: "context canceled"},
		{name: "wrapped status keeps code", err: fmt.Errorf("stop sandbox %q: %w", "s1", runtimeErr), wantCode: codes.NotFound,
			wantMsg: `stop sandbox "s1": rpc error: code = NotFound desc = sandbox not found`},
		{name: "other", err: errors.New("disk on fire"), wantCode: codes.Internal, wantMsg: "disk on fire"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := toStatus(tt.err)
			if tt.err == nil {
				if got != nil {
					t.Fatalf("ToStatus(nil) = %v", got)
				}
				return
			}
			if tt.same && got != tt.err {
				t.Errorf("status error was not returned unchanged")
			}
			st := status.Convert(got)
			if st.Code() != tt.wantCode || st.Message() != tt.wantMsg {
				t.Errorf("got %v %q, want %v %q", st.Code(), st.Message(), tt.wantCode, tt.wantMsg)
			}
		})
	}
}
