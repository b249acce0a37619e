package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnmq/cairn/client"
)

// sendLine is one line of `cairn send --json`.
type sendLine struct {
	ID        string `json:"id"`
	Member    string `json:"member"`
	Outcome   string `json:"outcome"`
	Error     string `json:"error"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, client.ErrDeliveryUnknown):
		return "unknown"
	}
	return "error"
}

func sendCmd() *cobra.Command {
	return sendOrPublishCmd(false)
}

func publishCmd() *cobra.Command {
	return sendOrPublishCmd(true)
}

// sendOrPublishCmd is cairn send, or with publish cairn publish: the same
// flags, output and outcomes, to a queue or to a topic.
func sendOrPublishCmd(publish bool) *cobra.Command {
	f := &sendFlags{publish: publish}
	use, short, long := "send DEST", "Send messages to a queue (DEST is NAME, or NAME#I for member I)",
		`Send messages to a queue, one at a time, each confirmed once stored on a
quorum of its member's replicas.`
	if publish {
		use, short, long = "publish TOPIC", "Publish messages to a topic (TOPIC is NAME, or NAME#I for member I)",
			`Publish messages to a topic, one at a time, each confirmed once every
subscription of the topic that selects it has stored it on a quorum of its
member's replicas (what no subscription selects is kept by none).`
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: long + ` The body is --body, or --size bytes of
filler, or "message N" when neither is given. With --dedup-id and --count
over 1, message N gets the dedup id ID-N. With --idempotent every message
without one gets its message id as its dedup id. Each --property sets a
property on every message: key=value is a string, key:int=5, key:float=2.5
and key:bool=true are typed (consumers' selectors compare them as such).

With --json each message prints one line:
  {"id":"...","member":"orders#0","outcome":"ok|unknown|error","error":""}
"unknown" means the message may or may not have been stored (its member's
host died mid-request). A message with a dedup id is resent by the server
to the same member until it gets an answer, so it ends "ok" (duplicate true
if the first copy had been stored); one without is not resent.

When its node is lost, it reconnects to another node and goes on
(--reconnect producer, the default); a message whose request was cut off
by the loss is resent there only with a dedup id, and is "unknown"
otherwise.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return f.run(cmd, args[0]) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.count, "count", 1, "number of messages")
	fl.StringVar(&f.body, "body", "", "message body")
	fl.IntVar(&f.size, "size", 0, "body of this many bytes")
	fl.DurationVar(&f.ttl, "ttl", 0, "time to live, e.g. 30s (default: the queue's)")
	fl.IntVar(&f.priority, "priority", 4, "priority, 0 (lowest) to 9 (highest)")
	fl.StringVar(&f.dedupID, "dedup-id", "", "duplicate-detection id")
	fl.BoolVar(&f.idempotent, "idempotent", false, "give each message without --dedup-id its message id as dedup id, so a send of unknown outcome is resent safely")
	f.property = propertyFlag(cmd)
	f.reconnect = reconnectFlag(cmd, client.ReconnectProducer)
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON line per message")
	return cmd
}

// sendFlags are cairn send's and cairn publish's flags.
type sendFlags struct {
	publish    bool
	count      int
	body       string
	size       int
	ttl        time.Duration
	priority   int
	dedupID    string
	idempotent bool
	asJSON     bool
	reconnect  *string
	property   *[]string
}

// run sends (or publishes) to dest as the flags say.
func (f *sendFlags) run(cmd *cobra.Command, dest string) error {
	if f.count < 1 {
		return fmt.Errorf("--count %d: send at least one message", f.count)
	}
	if cmd.Flags().Changed("body") && cmd.Flags().Changed("size") {
		return fmt.Errorf("--body and --size both given: choose one")
	}
	if f.size < 0 {
		return fmt.Errorf("--size %d is negative", f.size)
	}
	props, err := parseProperties(*f.property)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	conn, p, err := f.producer(cmd, dest)
	if err != nil {
		return err
	}
	defer conn.Close()
	out := newJSONLines(cmd.OutOrStdout())
	members := map[string]int{}
	for i := 1; i <= f.count; i++ {
		m := &client.Message{Body: messageBody(cmd, f.body, f.size, i), Properties: props}
		if f.dedupID != "" {
			m.DedupID = f.dedupID
			if f.count > 1 {
				m.DedupID = fmt.Sprintf("%s-%d", f.dedupID, i)
			}
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		r, err := p.Send(sctx, m)
		cancel()
		if f.asJSON {
			line := sendLine{ID: m.ID, Member: r.Member, Outcome: outcome(err), Duplicate: r.Duplicate}
			if r.ID != "" {
				line.ID = r.ID
			}
			if err != nil {
				line.Error = err.Error()
			}
			if werr := out.write(line); werr != nil {
				return werr
			}
		}
		if err != nil {
			if f.count == 1 {
				return err
			}
			return fmt.Errorf("message %d of %d: %w", i, f.count, err)
		}
		members[r.Member]++
	}
	if !f.asJSON {
		var parts []string
		for m, n := range members {
			parts = append(parts, fmt.Sprintf("%s: %d", m, n))
		}
		sort.Strings(parts)
		verb := "sent"
		if f.publish {
			verb = "published"
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s %s to %s (%s)\n", verb, plural(f.count, "message"), dest, strings.Join(parts, ", "))
	}
	return nil
}

// producer connects and makes the producer the flags say.
func (f *sendFlags) producer(cmd *cobra.Command, dest string) (*client.Connection, *client.Producer, error) {
	opts, err := dialOptions(cmd, *f.reconnect)
	if err != nil {
		return nil, nil, err
	}
	conn, err := client.Dial(cmd.Context(), servers(cmd), opts)
	if err != nil {
		return nil, nil, err
	}
	p, err := func() (*client.Producer, error) {
		s, err := conn.Session(client.AutoAck)
		if err != nil {
			return nil, err
		}
		newProducer := s.Producer
		if f.publish {
			newProducer = s.Publisher
		}
		p, err := newProducer(dest)
		if err != nil {
			return nil, err
		}
		if err := p.SetPriority(f.priority); err != nil {
			return nil, err
		}
		p.SetIdempotent(f.idempotent)
		return p, p.SetTimeToLive(f.ttl)
	}()
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, p, nil
}

func messageBody(cmd *cobra.Command, body string, size, i int) []byte {
	switch {
	case cmd.Flags().Changed("body"):
		return []byte(body)
	case cmd.Flags().Changed("size"):
		b := make([]byte, size)
		for j := range b {
			b[j] = 'a' + byte((i+j)%26)
		}
		return b
	}
	return []byte(fmt.Sprintf("message %d", i))
}
