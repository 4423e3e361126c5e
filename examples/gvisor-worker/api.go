package main

import (
	"context"
	"encoding/json"

	"google.golang.org/grpc"
)

// The Worker service, defined by hand with a JSON codec so no protoc is needed:
//
//	service Worker {
//	  rpc Run(RunRequest) returns (SandboxReply);        // gated: Unavailable once draining
//	  rpc Checkpoint(IDRequest) returns (SandboxReply);  // always allowed
//	  rpc Restore(IDRequest) returns (SandboxReply);     // gated
//	  rpc List(ListRequest) returns (ListReply);
//	}
const serviceName = "drainkit.worker.Worker"

// Full method names, for the admission classifier and clients.
const (
	MethodRun        = "/" + serviceName + "/Run"
	MethodCheckpoint = "/" + serviceName + "/Checkpoint"
	MethodRestore    = "/" + serviceName + "/Restore"
	MethodList       = "/" + serviceName + "/List"
)

// RunRequest starts a sandbox that the worker deletes after TimeoutS seconds of running
// (zero: a day; at most sandbox.MaxTimeoutS, ten years: outside [0, ten years] Run answers
// InvalidArgument).
type RunRequest struct {
	TimeoutS int `json:"timeout_s,omitempty"`
}

// IDRequest names a sandbox.
type IDRequest struct {
	ID string `json:"id"`
}

// SandboxReply is a sandbox's ID and state after the call.
type SandboxReply struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

// ListRequest asks for every sandbox.
type ListRequest struct{}

// ListReply lists every sandbox.
type ListReply struct {
	Sandboxes []SandboxReply `json:"sandboxes"`
}

// jsonCodec is the service's encoding: plain JSON, content-subtype "json".
type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
func (jsonCodec) Name() string                       { return "json" }

// workerServer is what a Worker implements.
type workerServer interface {
	Run(context.Context, *RunRequest) (*SandboxReply, error)
	Checkpoint(context.Context, *IDRequest) (*SandboxReply, error)
	Restore(context.Context, *IDRequest) (*SandboxReply, error)
	List(context.Context, *ListRequest) (*ListReply, error)
}

// unary builds the handler of one method whose request type is Req.
func unary[Req any, Reply any](method string, call func(workerServer, context.Context, *Req) (*Reply, error)) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: method,
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			req := new(Req)
			if err := dec(req); err != nil {
				return nil, err
			}
			handle := func(ctx context.Context, req any) (any, error) { return call(srv.(workerServer), ctx, req.(*Req)) }
			if icpt == nil {
				return handle(ctx, req)
			}
			return icpt(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + serviceName + "/" + method}, handle)
		},
	}
}

// serviceDesc describes the Worker service to grpc.Server.RegisterService.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*workerServer)(nil),
	Methods: []grpc.MethodDesc{
		unary("Run", workerServer.Run),
		unary("Checkpoint", workerServer.Checkpoint),
		unary("Restore", workerServer.Restore),
		unary("List", workerServer.List),
	},
	Metadata: "worker.json",
}

// Client calls a Worker over a connection.
type Client struct {
	cc grpc.ClientConnInterface
}

// NewClient returns a Client over cc. Dial with grpc.WithDefaultCallOptions(CallCodec())
// or pass it per call.
func NewClient(cc grpc.ClientConnInterface) *Client { return &Client{cc: cc} }

// CallCodec is the call option that makes a client speak the service's JSON.
func CallCodec() grpc.CallOption { return grpc.ForceCodec(jsonCodec{}) }

// Run starts a sandbox.
func (c *Client) Run(ctx context.Context, req *RunRequest) (*SandboxReply, error) {
	out := new(SandboxReply)
	return out, c.cc.Invoke(ctx, MethodRun, req, out, CallCodec())
}

// Checkpoint checkpoints a running sandbox and stops it.
func (c *Client) Checkpoint(ctx context.Context, id string) (*SandboxReply, error) {
	out := new(SandboxReply)
	return out, c.cc.Invoke(ctx, MethodCheckpoint, &IDRequest{ID: id}, out, CallCodec())
}

// Restore restores a checkpointed sandbox.
func (c *Client) Restore(ctx context.Context, id string) (*SandboxReply, error) {
	out := new(SandboxReply)
	return out, c.cc.Invoke(ctx, MethodRestore, &IDRequest{ID: id}, out, CallCodec())
}

// List lists every sandbox.
func (c *Client) List(ctx context.Context) (*ListReply, error) {
	out := new(ListReply)
	return out, c.cc.Invoke(ctx, MethodList, &ListRequest{}, out, CallCodec())
}
