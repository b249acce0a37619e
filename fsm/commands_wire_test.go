package fsm_test

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

func TestRejection_RoundTripKeepsSentinelAndText(t *testing.T) {
	for _, sentinel := range []error{fsm.ErrUnknownSession, fsm.ErrMemberFull, fsm.ErrDuplicateMessageID, fsm.ErrUnknownDestination} {
		err := fmt.Errorf("%w: detail", sentinel)
		back := fsm.Rejection(fsm.RejectionCode(err), err.Error())
		if !errors.Is(back, sentinel) || back.Error() != err.Error() {
			t.Errorf("%v came back as %v", err, back)
		}
	}
	if fsm.RejectionCode(errors.New("other")) != "" {
		t.Error("an error that is no rejection got a code")
	}
}

func TestDecodeMemberCommand_RefusesLeaderOnlyAndForeignCommands(t *testing.T) {
	for _, body := range []proto.Message{&fsmpb.Deliver{}, &fsmpb.Expire{}, &fsmpb.Configure{}, &fsmpb.CreateDestination{}} {
		if _, err := fsm.DecodeMemberCommand(fsm.MustCommand(body)); !errors.Is(err, fsm.ErrMalformed) {
			t.Errorf("%T: %v, want ErrMalformed", body, err)
		}
	}
	got, err := fsm.DecodeMemberCommand(fsm.MustCommand(&fsmpb.Ack{Session: "s", DeliveryIds: []uint64{3}}))
	if err != nil || got.(*fsmpb.Ack).Session != "s" {
		t.Fatalf("ack decoded as %v, %v", got, err)
	}
	if _, err := fsm.DecodeMetaCommand(&fsmpb.Command{Type: fsmpb.CommandType_COMMAND_TYPE_CREATE_DESTINATION, Payload: []byte{0xff}}); !errors.Is(err, fsm.ErrMalformed) {
		t.Errorf("a bad payload: %v, want ErrMalformed", err)
	}
}
