package fsm

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// Users are the cluster's client identities, held by the meta group so
// that every node authenticates and authorises the same way: a user is
// known by its password's hash or by a client certificate naming it, and
// may do what its grants say on the destinations their patterns name.

// Action is a bit set of what a grant allows.
type Action uint32

// The actions a grant may allow. ActionAdmin is the cluster's
// administration (nodes, connections, users), whatever the pattern.
const (
	ActionSend Action = 1 << iota
	ActionReceive
	ActionBrowse
	ActionManage
	ActionAdmin

	ActionAll = ActionSend | ActionReceive | ActionBrowse | ActionManage | ActionAdmin
)

// actionNames are the actions by the names the client API and the CLI use.
var actionNames = []struct {
	name string
	a    Action
}{{"send", ActionSend}, {"receive", ActionReceive}, {"browse", ActionBrowse}, {"manage", ActionManage}, {"admin", ActionAdmin}, {"all", ActionAll}}

// ParseAction reads an action's name.
func ParseAction(name string) (Action, error) {
	for _, n := range actionNames {
		if n.name == name {
			return n.a, nil
		}
	}
	return 0, fmt.Errorf("%w: action %q: use send, receive, browse, manage, admin or all", ErrInvalidSettings, name)
}

// Names lists the actions of a, by name.
func (a Action) Names() []string {
	if a == ActionAll {
		return []string{"all"}
	}
	var out []string
	for _, n := range actionNames[:5] {
		if a&n.a != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

// userNamePattern is what a user name may be, as a certificate's
// (transport/certs).
var userNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// MaxGrants bounds a user's grants.
const MaxGrants = 256

// ValidateUser checks a user as PutUser takes it.
func ValidateUser(u *fsmpb.User) error {
	switch {
	case u == nil:
		return fmt.Errorf("%w: no user", ErrMalformed)
	case !userNamePattern.MatchString(u.Name):
		return fmt.Errorf("%w: user name %q: use 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalidSettings, u.Name)
	case len(u.Grants) > MaxGrants:
		return fmt.Errorf("%w: %d grants; a user has at most %d", ErrInvalidSettings, len(u.Grants), MaxGrants)
	case len(u.PasswordHash) > 128:
		return fmt.Errorf("%w: a password hash of %d bytes", ErrMalformed, len(u.PasswordHash))
	}
	for _, g := range u.Grants {
		if err := validatePattern(g.Pattern); err != nil {
			return err
		}
		if g.Actions == 0 || Action(g.Actions)&^ActionAll != 0 {
			return fmt.Errorf("%w: grant on %q allows no known action", ErrInvalidSettings, g.Pattern)
		}
	}
	return nil
}

func validatePattern(p string) error {
	name := strings.TrimSuffix(p, "*")
	if p == "*" || (name != p && strings.HasSuffix(name, ".") && ValidateName(strings.TrimSuffix(name, ".")) == nil) || ValidateName(p) == nil {
		return nil
	}
	return fmt.Errorf("%w: pattern %q: use a destination name, a prefix such as orders.* or * for all", ErrInvalidSettings, p)
}

// Allows reports whether the grants let their user do a on destination
// dest (a member's address or a subscription counts as its destination's
// name; ActionAdmin needs no destination).
func Allows(grants []*fsmpb.Grant, a Action, dest string) bool {
	if i := strings.IndexByte(dest, '#'); i >= 0 {
		dest = dest[:i]
	}
	if topic := TopicOf(dest); topic != "" {
		dest = topic
	}
	for _, g := range grants {
		if Action(g.Actions)&a != a {
			continue
		}
		switch {
		case g.Pattern == "*", a == ActionAdmin && dest == "":
			return true
		case strings.HasSuffix(g.Pattern, ".*"):
			if strings.HasPrefix(dest, strings.TrimSuffix(g.Pattern, "*")) {
				return true
			}
		case g.Pattern == dest:
			return true
		}
	}
	return false
}

func (m *Meta) putUser(c *fsmpb.PutUser) Result {
	u := c.GetUser()
	if err := ValidateUser(u); err != nil {
		return Result{Err: err}
	}
	_, exists := m.users[u.Name]
	switch {
	case c.Create && exists:
		return Result{Err: fmt.Errorf("%w: user %q", ErrUserExists, u.Name)}
	case !c.Create && !exists:
		return Result{Err: fmt.Errorf("%w: user %q", ErrUnknownUser, u.Name)}
	}
	m.users[u.Name] = proto.CloneOf(u)
	return Result{}
}

func (m *Meta) deleteUser(c *fsmpb.DeleteUser) Result {
	if _, ok := m.users[c.Name]; !ok {
		return Result{Err: fmt.Errorf("%w: user %q", ErrUnknownUser, c.Name)}
	}
	delete(m.users, c.Name)
	return Result{}
}

// User returns the user named name; it must not be changed.
func (m *Meta) User(name string) (*fsmpb.User, bool) {
	u, ok := m.users[name]
	return u, ok
}

// Users returns the users, sorted by name; they must not be changed.
func (m *Meta) Users() []*fsmpb.User {
	out := slices.Collect(maps.Values(m.users))
	slices.SortFunc(out, func(a, b *fsmpb.User) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
