package draingrpc

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/pause"
)

// listServices asks a reflection stream for the server's services, as a
// tool's first request does, and returns the answer's error.
func listServices(stream reflectionpb.ServerReflection_ServerReflectionInfoClient) error {
	req := &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: "*"}}
	if err := stream.Send(req); err != nil && !errors.Is(err, io.EOF) { // the status is Recv's
		return err
	}
	_, err := stream.Recv()
	return err
}

// Fault: the server reflection service (grpc.reflection.v1, registered
// with reflection.Register) went through the Classifier like work: with
// the usual default class (drain.Create) the stream that grpcurl's and
// grpcui's reflection client keeps open between requests was a Create in
// flight, which the drain's gate phase waited for until its deadline
// (then the preserve phase took it for a create that might still start a
// sandbox), and the grpc step's GracefulStop until the step's deadline,
// after which Stop cut every RPC and the step failed. An operator's grpcurl
// of an exempt method (a checkpoint) during the drain was refused too: it
// resolves the method by reflection first. Reflection is now never gated
// nor counted, like health, and its streams end as Stop begins.
func TestAReflectionStreamHoldsNeitherTheDrainNorTheGrpcStep(t *testing.T) {
	g := &drain.Gate{}
	s := serve(t, g, "tcp")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second) // a Recv that never comes fails, not hangs
	defer cancel()
	refl, err := s.refl.ServerReflectionInfo(ctx)
	require.NoError(t, err)
	require.NoError(t, listServices(refl), "reflection answers")

	var during error
	operator := drain.NewStep(deadline.Phase{Name: "operator", Reserve: deadline.Fixed(time.Second)}, func(ctx context.Context) (any, error) {
		again, err := s.refl.ServerReflectionInfo(ctx)
		if err == nil {
			err = listServices(again)
			_ = again.CloseSend()
		}
		during = err
		return nil, nil
	})
	budget, err := deadline.New(20*time.Second, deadline.Config{})
	require.NoError(t, err)
	d, err := drain.New(drain.Config{Budget: budget, Gate: g,
		Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }),
		Steps:     []drain.Step{operator, Step("grpc", s.srv, g, 5*time.Second)}})
	require.NoError(t, err)

	rep := d.Shutdown(context.Background())
	gate := rep.Phase(drain.PhaseGate)
	assert.Equal(t, drain.OK, gate.Result, "the gate phase did not wait for reflection: %s", gate.Error)
	assert.NoError(t, during, "reflection answered during the drain")
	step := rep.Phase("grpc")
	assert.Equal(t, drain.OK, step.Result, "GracefulStop did not wait for reflection: %s", step.Error)
	_, err = refl.Recv()
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "server stopping")
	assert.Zero(t, g.InFlight(drain.Create))
}
