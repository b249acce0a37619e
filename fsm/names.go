package fsm

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxNameLength bounds a destination name.
const MaxNameLength = 200

// SubscriptionSep joins a topic's name and a subscription's id into the
// subscription's destination name: TOPIC::ID.
const SubscriptionSep = "::"

// ValidateName checks a destination name: 1 to 200 characters of letters,
// digits, '.', '_' and '-', not starting with '.' or '-'. '#' is reserved for
// member addresses (NAME#I); a subscription's name is two such names joined
// by "::" (TOPIC::ID), which only topics' subscriptions have.
func ValidateName(name string) error {
	if topic, id, ok := strings.Cut(name, SubscriptionSep); ok && len(name) <= MaxNameLength {
		if err := validatePart(topic); err != nil {
			return err
		}
		return validatePart(id)
	}
	return validatePart(name)
}

// TopicOf is the topic of a subscription's destination name, "" for any
// other name.
func TopicOf(name string) string {
	topic, _, _ := strings.Cut(name, SubscriptionSep)
	if topic == name {
		return ""
	}
	return topic
}

func validatePart(name string) error {
	if name == "" {
		return fmt.Errorf("%w: the name is empty", ErrInvalidName)
	}
	if len(name) > MaxNameLength {
		return fmt.Errorf("%w: %d characters, at most %d", ErrInvalidName, len(name), MaxNameLength)
	}
	if name[0] == '.' || name[0] == '-' {
		return fmt.Errorf("%w: %q starts with %q", ErrInvalidName, name, name[0])
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
		if !ok {
			return fmt.Errorf("%w: %q has %q at %d; use letters, digits, '.', '_' and '-'", ErrInvalidName, name, r, i)
		}
	}
	return nil
}

// MemberName is the address of member index of destination dest: "dest#index".
func MemberName(dest string, index uint32) string {
	return dest + "#" + strconv.FormatUint(uint64(index), 10)
}

// ParseAddress splits a destination address into the destination name and,
// for "NAME#I", the member index. member is -1 for a plain name.
func ParseAddress(addr string) (dest string, member int, err error) {
	name, idx, found := strings.Cut(addr, "#")
	if err := ValidateName(name); err != nil {
		return "", 0, err
	}
	if !found {
		return name, -1, nil
	}
	i, err := strconv.ParseUint(idx, 10, 16)
	if err != nil || (len(idx) > 1 && idx[0] == '0') {
		return "", 0, fmt.Errorf("%w: %q: a member address is NAME#I with I a member index", ErrInvalidName, addr)
	}
	return name, int(i), nil
}
