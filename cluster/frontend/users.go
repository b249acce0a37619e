package frontend

import (
	"context"
	"fmt"

	"github.com/cairnmq/cairn/cluster/auth"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// Users: the client API's user management, over the meta group's users.

func (s *clientService) CreateUser(ctx context.Context, req *clientpb.CreateUserRequest) (*clientpb.UserInfo, error) {
	u := &fsmpb.User{Name: req.Name}
	err := s.a.UsersAllowed()
	if err == nil {
		err = setPassword(u, req.Password, true)
	}
	if err == nil {
		u.Grants, err = grantsFromWire(req.Grants)
	}
	if err == nil {
		err = s.a.PutUser(ctx, u, true)
	}
	if err != nil {
		return nil, transport.Status(WireError(err))
	}
	return userInfo(u), nil
}

func (s *clientService) UpdateUser(ctx context.Context, req *clientpb.UpdateUserRequest) (*clientpb.UserInfo, error) {
	var u *fsmpb.User
	for _, have := range s.a.Users() {
		if have.Name == req.Name {
			u = &fsmpb.User{Name: have.Name, PasswordHash: have.PasswordHash, Grants: have.Grants}
		}
	}
	err := s.a.UsersAllowed()
	switch {
	case err != nil:
	case u == nil:
		err = fmt.Errorf("%w: %q", transport.ErrUnknownUser, req.Name)
	case req.SetPassword:
		err = setPassword(u, req.Password, false)
	}
	if err == nil && req.SetGrants {
		u.Grants, err = grantsFromWire(req.Grants)
	}
	if err == nil {
		err = s.a.PutUser(ctx, u, false)
	}
	if err != nil {
		return nil, transport.Status(WireError(err))
	}
	return userInfo(u), nil
}

func (s *clientService) DeleteUser(ctx context.Context, req *clientpb.DeleteUserRequest) (*clientpb.DeleteUserResponse, error) {
	err := s.a.UsersAllowed()
	if err == nil {
		err = s.a.DeleteUser(ctx, req.Name)
	}
	if err != nil {
		return nil, transport.Status(WireError(err))
	}
	return &clientpb.DeleteUserResponse{}, nil
}

func (s *clientService) ListUsers(ctx context.Context, req *clientpb.ListUsersRequest) (*clientpb.ListUsersResponse, error) {
	resp := &clientpb.ListUsersResponse{}
	for _, u := range s.a.Users() {
		resp.Users = append(resp.Users, userInfo(u))
	}
	return resp, nil
}

// setPassword sets u's password hash; an empty password leaves a new user
// known by its certificate only, and is refused as a change.
func setPassword(u *fsmpb.User, password string, creating bool) error {
	if password == "" && creating {
		return nil
	}
	h, err := auth.HashPassword(password)
	u.PasswordHash = h
	return err
}

func grantsFromWire(in []*clientpb.Grant) ([]*fsmpb.Grant, error) {
	out := make([]*fsmpb.Grant, 0, len(in))
	for _, g := range in {
		var acts fsm.Action
		for _, name := range g.Actions {
			a, err := fsm.ParseAction(name)
			if err != nil {
				return nil, err
			}
			acts |= a
		}
		out = append(out, &fsmpb.Grant{Pattern: g.Pattern, Actions: uint32(acts)})
	}
	return out, nil
}

func userInfo(u *fsmpb.User) *clientpb.UserInfo {
	info := &clientpb.UserInfo{Name: u.Name, HasPassword: len(u.PasswordHash) > 0}
	for _, g := range u.Grants {
		info.Grants = append(info.Grants, &clientpb.Grant{Pattern: g.Pattern, Actions: fsm.Action(g.Actions).Names()})
	}
	return info
}
