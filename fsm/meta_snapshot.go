package fsm

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"

	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// Snapshot returns the whole meta state; it is small.
func (m *Meta) Snapshot() *fsmpb.MetaSnapshot {
	s := &fsmpb.MetaSnapshot{Applied: m.applied, Destinations: m.Destinations(), Nodes: m.Nodes(), ClientIds: m.ClientIDs(), Users: m.Users()}
	for id, inc := range m.removed {
		s.Removed = append(s.Removed, id)
		if inc != "" {
			if s.RemovedIncarnations == nil {
				s.RemovedIncarnations = map[string]string{}
			}
			s.RemovedIncarnations[id] = inc
		}
	}
	slices.Sort(s.Removed)
	s.Decommissioning = slices.Sorted(maps.Keys(m.decommissioning))
	for _, id := range slices.Sorted(maps.Keys(m.rejoining)) {
		s.Rejoining = append(s.Rejoining, &fsmpb.Rejoining{Node: id, Groups: slices.Sorted(maps.Keys(m.rejoining[id]))})
	}
	return s
}

// WriteSnapshot writes the state for RestoreMeta, length-delimited so that
// a stream cut short is recognised.
func (m *Meta) WriteSnapshot(w io.Writer) error {
	_, err := deterministic.MarshalTo(w, m.Snapshot())
	return err
}

// RestoreMeta reads a state written by WriteSnapshot.
func RestoreMeta(r io.Reader) (*Meta, error) {
	var s fsmpb.MetaSnapshot
	opts := protodelim.UnmarshalOptions{MaxSize: maxSnapshotRecord}
	if err := opts.UnmarshalFrom(bufio.NewReader(r), &s); err != nil {
		return nil, fmt.Errorf("%w: meta snapshot: %v", ErrCorrupt, err)
	}
	m := NewMeta()
	m.applied = s.Applied
	for _, d := range s.Destinations {
		if err := validateDestination(d); err != nil {
			return nil, fmt.Errorf("%w: meta snapshot: %v", ErrCorrupt, err)
		}
		m.destinations[d.Name] = d
	}
	for _, n := range s.Nodes {
		m.nodes[n.Id] = n
	}
	for _, id := range s.Removed {
		m.removed[id] = s.RemovedIncarnations[id]
	}
	for _, id := range s.Decommissioning {
		m.decommissioning[id] = true
	}
	for _, c := range s.ClientIds {
		m.clientIDs[c.ClientId] = c
	}
	for _, u := range s.Users {
		if err := ValidateUser(u); err != nil {
			return nil, fmt.Errorf("%w: meta snapshot: %v", ErrCorrupt, err)
		}
		m.users[u.Name] = u
	}
	for _, r := range s.Rejoining {
		m.rejoining[r.Node] = map[string]bool{}
		for _, g := range r.Groups {
			m.rejoining[r.Node][g] = true
		}
	}
	return m, nil
}
