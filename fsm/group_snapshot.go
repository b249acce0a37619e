package fsm

import (
	"bufio"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// GroupImage is a point-in-time copy of a shared group's state: a
// MemberImage of each member.
type GroupImage struct {
	header  *fsmpb.GroupSnapshot
	members []*MemberImage
}

// Capture copies the group's state for a snapshot (Member.Capture).
func (g *Group) Capture() *GroupImage {
	img := &GroupImage{header: &fsmpb.GroupSnapshot{Applied: g.applied, Members: g.Members()}}
	for _, name := range img.header.Members {
		img.members = append(img.members, g.members[name].Capture())
	}
	return img
}

// Members returns the image of each member, in the order Group.Members
// names them, for a caller that sets their body readers.
func (img *GroupImage) Members() []*MemberImage { return img.members }

// WriteTo writes the image as a length-delimited GroupSnapshot header, then
// each member's image as MemberImage.WriteTo writes it.
func (img *GroupImage) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	k, err := deterministic.MarshalTo(bw, img.header)
	n := int64(k)
	if err != nil {
		return n, err
	}
	for _, m := range img.members {
		// bw is large enough for the member's writer to be bw itself.
		k, err := m.WriteTo(bw)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, bw.Flush()
}

// GroupSnapshot is a snapshot written by GroupImage.WriteTo being read.
type GroupSnapshot struct {
	br     *bufio.Reader
	header *fsmpb.GroupSnapshot
	next   int
}

// OpenGroupSnapshot reads a group snapshot's header; a header that names a
// member twice, or none, is corrupt.
func OpenGroupSnapshot(r io.Reader) (*GroupSnapshot, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	var h fsmpb.GroupSnapshot
	if err := (protodelim.UnmarshalOptions{MaxSize: maxSnapshotRecord}).UnmarshalFrom(br, &h); err != nil {
		return nil, fmt.Errorf("%w: group snapshot header: %v", ErrCorrupt, err)
	}
	seen := make(map[string]bool, len(h.Members))
	for _, name := range h.Members {
		if name == "" || seen[name] {
			return nil, fmt.Errorf("%w: group snapshot names member %q twice or empty", ErrCorrupt, name)
		}
		seen[name] = true
	}
	return &GroupSnapshot{br: br, header: &h}, nil
}

// Members names the members the snapshot holds, in order.
func (s *GroupSnapshot) Members() []string { return s.header.Members }

// NextMember opens the next member's snapshot, which the caller reads to
// its last record before it asks for the next one; io.EOF after the last.
func (s *GroupSnapshot) NextMember() (string, *MemberSnapshot, error) {
	if s.next == len(s.header.Members) {
		return "", nil, io.EOF
	}
	name := s.header.Members[s.next]
	// s.br is large enough for the member's reader to be s.br itself, so
	// that it reads no further than its own records.
	ms, err := OpenMemberSnapshot(s.br)
	if err != nil {
		return "", nil, fmt.Errorf("member %s: %w", name, err)
	}
	s.next++
	return name, ms, nil
}

// NewGroupFrom builds the group a snapshot holds from its members, restored
// in the order NextMember gave them.
func (s *GroupSnapshot) NewGroupFrom(members []*Member) (*Group, error) {
	if len(members) != len(s.header.Members) {
		return nil, fmt.Errorf("%w: group snapshot of %d members, %d restored", ErrCorrupt, len(s.header.Members), len(members))
	}
	g := NewGroup()
	g.applied = s.header.Applied
	for i, name := range s.header.Members {
		g.members[name] = members[i]
		g.bytes += members[i].stored
	}
	return g, nil
}

// RestoreGroup reads a state written by GroupImage.WriteTo.
func RestoreGroup(r io.Reader) (*Group, error) {
	snap, err := OpenGroupSnapshot(r)
	if err != nil {
		return nil, err
	}
	var members []*Member
	for {
		name, ms, err := snap.NextMember()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		var rec []byte
		m, err := ms.Restore(func() (*fsmpb.StoredMessage, BodyRef, error) {
			if rec, err = ms.NextRecord(rec[:0]); err != nil {
				return nil, BodyRef{}, err
			}
			sm, err := DecodeStoredMessage(rec)
			return sm, BodyRef{}, err
		})
		if err != nil {
			return nil, fmt.Errorf("member %s: %w", name, err)
		}
		members = append(members, m)
	}
	return snap.NewGroupFrom(members)
}
