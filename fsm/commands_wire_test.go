package fsm_test

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// A rejection crosses the wire keeping its sentinel and text; an error
// that is none of them still arrives as an error (a malformed command's),
// since a code of "" reads as success on the other side.
func TestRejection_RoundTripKeepsSentinelAndText(t *testing.T) {
	for _, sentinel := range []error{fsm.ErrUnknownSession, fsm.ErrMemberFull, fsm.ErrDuplicateMessageID, fsm.ErrUnknownDestination, fsm.ErrClientIDInUse} {
		err := fmt.Errorf("%w: detail", sentinel)
		back := fsm.Rejection(fsm.RejectionCode(err), err.Error())
		if !errors.Is(back, sentinel) || back.Error() != err.Error() {
			t.Errorf("%v came back as %v", err, back)
		}
	}
	if fsm.RejectionCode(nil) != "" {
		t.Error("no error got a code")
	}
	other := errors.New("other")
	if back := fsm.Rejection(fsm.RejectionCode(other), other.Error()); !errors.Is(back, fsm.ErrMalformed) || back.Error() != "other" {
		t.Errorf("an error that is no rejection came back as %v", back)
	}
}

func TestDecodeMemberCommand_RefusesLeaderOnlyAndForeignCommands(t *testing.T) {
	for _, body := range []proto.Message{&fsmpb.Deliver{}, &fsmpb.Expire{}, &fsmpb.Configure{}, &fsmpb.CreateDestination{},
		&fsmpb.Move{Target: "q#1", MessageIds: []string{"a"}}, &fsmpb.Moved{MessageIds: []string{"a"}}, &fsmpb.Wake{Now: 1}} {
		if _, err := fsm.DecodeMemberCommand(fsm.MustCommand(body)); !errors.Is(err, fsm.ErrMalformed) {
			t.Errorf("%T: %v, want ErrMalformed", body, err)
		}
	}
	got, err := fsm.DecodeMemberCommand(fsm.MustCommand(&fsmpb.Ack{Session: "s", DeliveryIds: []uint64{3}}))
	if err != nil || got.(*fsmpb.Ack).Session != "s" {
		t.Fatalf("ack decoded as %v, %v", got, err)
	}
	// Forwarded commands keep the fields the redelivery delay needs.
	for _, body := range []proto.Message{
		&fsmpb.Recover{Session: "s", Now: 7},
		&fsmpb.Release{Session: "s", Now: 7},
		&fsmpb.Return{Session: "s", DeliveryIds: []uint64{1}, Now: 7},
		&fsmpb.Enqueue{Now: 7, Messages: []*fsmpb.Message{{Id: "m", DeliveryCount: 2, Redelivered: true}}},
	} {
		got, err := fsm.DecodeMemberCommand(fsm.MustCommand(body))
		if err != nil || !proto.Equal(got, body) {
			t.Errorf("%T decoded as %v, %v", body, got, err)
		}
	}
	if _, err := fsm.DecodeMetaCommand(&fsmpb.Command{Type: fsmpb.CommandType_COMMAND_TYPE_CREATE_DESTINATION, Payload: []byte{0xff}}); !errors.Is(err, fsm.ErrMalformed) {
		t.Errorf("a bad payload: %v, want ErrMalformed", err)
	}
}
