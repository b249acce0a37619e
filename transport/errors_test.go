package transport

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestErrors_RoundTripKeepsTheSentinelAndText(t *testing.T) {
	for _, r := range reasons {
		err := fmt.Errorf("%w: detail for %s", r.err, r.reason)
		st := Status(err)
		if s, _ := status.FromError(st); s.Code() != r.code {
			t.Errorf("%s: code %v, want %v", r.reason, s.Code(), r.code)
		}
		if !ServerAnswered(st) {
			t.Errorf("%s: a typed status is not recognised as the server's answer", r.reason)
		}
		back := FromStatus(st)
		if !errors.Is(back, r.err) {
			t.Errorf("%s: FromStatus(Status(err)) = %v, does not match the sentinel", r.reason, back)
		}
		if back.Error() != err.Error() {
			t.Errorf("%s: text %q, want %q", r.reason, back.Error(), err.Error())
		}
		if p := FromProto(ToProto(err)); !errors.Is(p, r.err) || p.Error() != err.Error() {
			t.Errorf("%s: in-band round trip gave %v", r.reason, p)
		}
	}
}

func TestErrors_CallFailuresAreNotServerAnswers(t *testing.T) {
	err := status.Error(codes.Unavailable, "connection refused")
	if ServerAnswered(err) {
		t.Fatal("a bare Unavailable status counted as the server's answer")
	}
	if !errors.Is(FromStatus(err), ErrUnavailable) {
		t.Fatalf("FromStatus(Unavailable) = %v, want ErrUnavailable", FromStatus(err))
	}
	if !errors.Is(FromStatus(status.Error(codes.ResourceExhausted, "grpc: received message larger than max")), ErrMessageTooLarge) {
		t.Fatal("gRPC's own size limit is not reported as ErrMessageTooLarge")
	}
	if !errors.Is(FromStatus(Status(context.DeadlineExceeded)), context.DeadlineExceeded) {
		t.Fatal("a deadline does not come back as context.DeadlineExceeded")
	}
	if FromProto(nil) != nil || ToProto(nil) != nil || Status(nil) != nil {
		t.Fatal("nil errors do not stay nil")
	}
	if got := Status(errors.New("boom")); status.Code(got) != codes.Internal {
		t.Fatalf("an untyped error gave %v, want Internal", status.Code(got))
	}
}
