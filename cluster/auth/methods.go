package auth

import (
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// need is what a unary call of the client API needs: an action on a
// destination, ActionAdmin, or nothing beyond being authenticated (0). A
// method missing here needs admin.
func need(req any) (fsm.Action, string) {
	switch r := req.(type) {
	case *clientpb.CreateDestinationRequest:
		return fsm.ActionManage, r.GetName()
	case *clientpb.UpdateDestinationRequest:
		return fsm.ActionManage, r.GetName()
	case *clientpb.DeleteDestinationRequest:
		return fsm.ActionManage, r.GetName()
	case *clientpb.PurgeDestinationRequest:
		return fsm.ActionManage, r.GetName()
	case *clientpb.DeleteSubscriptionRequest:
		return fsm.ActionManage, r.GetTopic()
	case *clientpb.ShowDestinationRequest:
		return fsm.ActionBrowse, r.GetName()
	case *clientpb.BrowseDestinationRequest:
		return fsm.ActionBrowse, r.GetName()
	case *clientpb.SendRequest:
		return fsm.ActionSend, r.GetDestination()
	case *clientpb.ListDestinationsRequest:
		return 0, "" // lists what the caller may browse
	}
	return fsm.ActionAdmin, ""
}

// subject names what an administrative call acts on, for the audit log,
// when it is not a destination.
func subject(req any) string {
	switch r := req.(type) {
	case *clientpb.CreateUserRequest:
		return r.GetName()
	case *clientpb.UpdateUserRequest:
		return r.GetName()
	case *clientpb.DeleteUserRequest:
		return r.GetName()
	case *clientpb.RemoveNodeRequest:
		return r.GetId()
	case *clientpb.DestroyConnectionRequest:
		return r.GetId()
	}
	return ""
}
