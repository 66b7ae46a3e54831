package server

import "context"

// UnaryNext forwards a (possibly rewritten) request to the runtime and returns
// its response bytes; its error is the runtime's status.
type UnaryNext func(ctx context.Context, req []byte) ([]byte, error)

// UnaryHook intercepts one unary method. It gets the raw request and next,
// which forwards to the runtime; it may refuse (return an error without
// calling next), rewrite, or observe the result. Its error goes through
// toStatus.
type UnaryHook func(ctx context.Context, req []byte, next UnaryNext) ([]byte, error)

// Hooks maps full method names (e.g. "/runtime.v1.RuntimeService/RunPodSandbox")
// to their hooks. Only hooked methods are decoded.
type Hooks map[string]UnaryHook
