package server

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
)

// UnaryNext forwards a (possibly rewritten) request to the runtime and returns
// its response bytes; its error is the runtime's status.
type UnaryNext func(ctx context.Context, req []byte) ([]byte, error)

// UnaryHook intercepts one unary method. It gets the raw request and next,
// which forwards to the runtime; it may refuse (return an error without
// calling next), rewrite, or observe the result. Its error goes through
// ToStatus.
type UnaryHook func(ctx context.Context, req []byte, next UnaryNext) ([]byte, error)

// Hooks maps full method names (e.g. "/runtime.v1.RuntimeService/RunPodSandbox")
// to their hooks. Only hooked methods are decoded.
type Hooks map[string]UnaryHook

// TypedHook adapts a hook written against the generated CRI types into a
// UnaryHook: the request is decoded before h runs, next encodes and forwards,
// the response is encoded after. For example:
//
//	hooks[runtimeapi.RuntimeService_RunPodSandbox_FullMethodName] = server.TypedHook(
//		func(ctx context.Context, req *runtimeapi.RunPodSandboxRequest,
//			next func(context.Context, *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error),
//		) (*runtimeapi.RunPodSandboxResponse, error) { ... })
func TypedHook[Req, Resp any, PReq interface {
	*Req
	proto.Message
}, PResp interface {
	*Resp
	proto.Message
}](h func(ctx context.Context, req PReq, next func(context.Context, PReq) (PResp, error)) (PResp, error)) UnaryHook {
	return func(ctx context.Context, raw []byte, next UnaryNext) ([]byte, error) {
		req := PReq(new(Req))
		if err := proto.Unmarshal(raw, req); err != nil {
			return nil, fmt.Errorf("decode %T: %w: %w", req, ErrInvalidRequest, err)
		}
		typedNext := func(ctx context.Context, r PReq) (PResp, error) {
			b, err := proto.Marshal(r)
			if err != nil {
				return nil, fmt.Errorf("encode %T: %w", r, err)
			}
			out, err := next(ctx, b)
			if err != nil {
				return nil, err
			}
			resp := PResp(new(Resp))
			if err := proto.Unmarshal(out, resp); err != nil {
				return nil, fmt.Errorf("decode %T: %w", resp, err)
			}
			return resp, nil
		}
		resp, err := h(ctx, req, typedNext)
		if err != nil {
			return nil, err
		}
		b, err := proto.Marshal(resp)
		if err != nil {
			return nil, fmt.Errorf("encode %T: %w", resp, err)
		}
		return b, nil
	}
}
