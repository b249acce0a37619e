package client

import (
	"context"
	"fmt"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// Grant lets a user do Actions ("send", "receive", "browse", "manage",
// "admin", or "all") on the destinations Pattern names: a name, a prefix
// ("orders.*") or all ("*").
type Grant struct {
	Pattern string   `json:"pattern"`
	Actions []string `json:"actions"`
}

// UserInfo describes a user; its password is never shown.
type UserInfo struct {
	Name        string  `json:"name"`
	HasPassword bool    `json:"has_password"`
	Grants      []Grant `json:"grants"`
}

// CreateUser makes a user with password (empty: known by its client
// certificate only) and grants. It needs the admin permission.
func (a *Admin) CreateUser(ctx context.Context, name, password string, grants []Grant) (UserInfo, error) {
	var info *clientpb.UserInfo
	err := a.call(ctx, func(api clientpb.ClientServiceClient) (err error) {
		info, err = api.CreateUser(ctx, &clientpb.CreateUserRequest{Name: name, Password: password, Grants: grantsToWire(grants)})
		return err
	})
	return userFromWire(info), err
}

// SetPassword changes a user's password.
func (a *Admin) SetPassword(ctx context.Context, name, password string) error {
	return a.call(ctx, func(api clientpb.ClientServiceClient) error {
		_, err := api.UpdateUser(ctx, &clientpb.UpdateUserRequest{Name: name, SetPassword: true, Password: password})
		return err
	})
}

// SetGrants replaces a user's grants.
func (a *Admin) SetGrants(ctx context.Context, name string, grants []Grant) (UserInfo, error) {
	var info *clientpb.UserInfo
	err := a.call(ctx, func(api clientpb.ClientServiceClient) (err error) {
		info, err = api.UpdateUser(ctx, &clientpb.UpdateUserRequest{Name: name, SetGrants: true, Grants: grantsToWire(grants)})
		return err
	})
	return userFromWire(info), err
}

// DeleteUser deletes a user; its open connections can do nothing more.
func (a *Admin) DeleteUser(ctx context.Context, name string) error {
	return a.call(ctx, func(api clientpb.ClientServiceClient) error {
		_, err := api.DeleteUser(ctx, &clientpb.DeleteUserRequest{Name: name})
		return err
	})
}

// ListUsers lists the cluster's users, by name.
func (a *Admin) ListUsers(ctx context.Context) ([]UserInfo, error) {
	var resp *clientpb.ListUsersResponse
	err := a.call(ctx, func(api clientpb.ClientServiceClient) (err error) {
		resp, err = api.ListUsers(ctx, &clientpb.ListUsersRequest{})
		return err
	})
	out := make([]UserInfo, 0, len(resp.GetUsers()))
	for _, u := range resp.GetUsers() {
		out = append(out, userFromWire(u))
	}
	return out, err
}

func grantsToWire(in []Grant) []*clientpb.Grant {
	out := make([]*clientpb.Grant, 0, len(in))
	for _, g := range in {
		out = append(out, &clientpb.Grant{Pattern: g.Pattern, Actions: g.Actions})
	}
	return out
}

func userFromWire(u *clientpb.UserInfo) UserInfo {
	info := UserInfo{Name: u.GetName(), HasPassword: u.GetHasPassword(), Grants: []Grant{}}
	for _, g := range u.GetGrants() {
		info.Grants = append(info.Grants, Grant{Pattern: g.Pattern, Actions: g.Actions})
	}
	return info
}

// ChangeGrants replaces a user's grants with what change makes of them
// (cairn user permit and revoke). Two changes of one user at once may
// lose one: they read and write the whole list.
func (a *Admin) ChangeGrants(ctx context.Context, name string, change func([]Grant) []Grant) (UserInfo, error) {
	users, err := a.ListUsers(ctx)
	if err != nil {
		return UserInfo{}, err
	}
	for _, u := range users {
		if u.Name == name {
			return a.SetGrants(ctx, name, change(u.Grants))
		}
	}
	return UserInfo{}, fmt.Errorf("%w: %q", ErrUnknownUser, name)
}
