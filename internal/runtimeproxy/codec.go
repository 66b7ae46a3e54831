package runtimeproxy

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// codecName is the name the pass-through codec reports. It is "proto" so that
// the content-type on the wire stays application/grpc+proto: the bytes are
// protobuf, cri-guard just does not decode them.
const codecName = "proto"

// Frame is one undecoded gRPC message. It holds references to gRPC's pooled
// buffers; the codec hands them from the receiving side to the sending side
// without copying. A Frame is not safe for concurrent use.
type Frame struct {
	data mem.BufferSlice
}

// NewFrame returns a Frame carrying b. The Frame does not copy b; b must not be
// modified afterwards.
func NewFrame(b []byte) *Frame {
	f := &Frame{}
	f.setBytes(b)
	return f
}

// setBytes replaces the Frame's content with b (not copied).
func (f *Frame) setBytes(b []byte) {
	f.Free()
	if len(b) > 0 {
		f.data = mem.BufferSlice{mem.SliceBuffer(b)}
	}
}

// Bytes returns a copy of the message bytes.
func (f *Frame) Bytes() []byte {
	if f.data == nil {
		return []byte{}
	}
	return f.data.Materialize()
}

// size returns the message length in bytes.
func (f *Frame) size() int { return f.data.Len() }

// Free releases the buffers the Frame holds. It is safe to call more than once
// and on a Frame whose content was already handed to gRPC.
func (f *Frame) Free() {
	if f.data != nil {
		f.data.Free()
		f.data = nil
	}
}

// Codec is a gRPC encoding.CodecV2 that moves Frames as raw bytes. It is meant
// to be forced per server (grpc.ForceServerCodecV2) or per call
// (grpc.ForceCodecV2), never registered globally.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// Marshal hands the Frame's buffers to gRPC, which frees them after writing;
// the Frame is left empty.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*Frame)
	if !ok {
		return nil, fmt.Errorf("marshal %T: pass-through codec needs *runtimeproxy.Frame", v)
	}
	out := f.data
	f.data = nil
	return out, nil
}

// Unmarshal keeps a reference to data in the Frame instead of copying it.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*Frame)
	if !ok {
		return fmt.Errorf("unmarshal into %T: pass-through codec needs *runtimeproxy.Frame", v)
	}
	f.Free()
	data.Ref()
	f.data = data
	return nil
}

// Name returns codecName.
func (Codec) Name() string { return codecName }
