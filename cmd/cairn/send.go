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
	var (
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
	)
	cmd := &cobra.Command{
		Use:   "send DEST",
		Short: "Send messages to a queue (DEST is NAME, or NAME#I for member I)",
		Long: `Send messages to a queue, one at a time, each confirmed once stored on a
quorum of its member's replicas. The body is --body, or --size bytes of
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

When its node is lost, send reconnects to another node and goes on
(--reconnect producer, the default); a message whose request was cut off
by the loss is resent there only with a dedup id, and is "unknown"
otherwise.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 1 {
				return fmt.Errorf("--count %d: send at least one message", count)
			}
			if cmd.Flags().Changed("body") && cmd.Flags().Changed("size") {
				return fmt.Errorf("--body and --size both given: choose one")
			}
			if size < 0 {
				return fmt.Errorf("--size %d is negative", size)
			}
			props, err := parseProperties(*property)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			opts, err := dialOptions(*reconnect)
			if err != nil {
				return err
			}
			conn, err := client.Dial(ctx, servers(cmd), opts)
			if err != nil {
				return err
			}
			defer conn.Close()
			s, err := conn.Session(client.AutoAck)
			if err != nil {
				return err
			}
			p, err := s.Producer(args[0])
			if err != nil {
				return err
			}
			if err := p.SetPriority(priority); err != nil {
				return err
			}
			if err := p.SetTimeToLive(ttl); err != nil {
				return err
			}
			p.SetIdempotent(idempotent)
			out := newJSONLines(cmd.OutOrStdout())
			members := map[string]int{}
			for i := 1; i <= count; i++ {
				m := &client.Message{Body: messageBody(cmd, body, size, i), Properties: props}
				if dedupID != "" {
					m.DedupID = dedupID
					if count > 1 {
						m.DedupID = fmt.Sprintf("%s-%d", dedupID, i)
					}
				}
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				r, err := p.Send(sctx, m)
				cancel()
				if asJSON {
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
					if count == 1 {
						return err
					}
					return fmt.Errorf("message %d of %d: %w", i, count, err)
				}
				members[r.Member]++
			}
			if !asJSON {
				var parts []string
				for m, n := range members {
					parts = append(parts, fmt.Sprintf("%s: %d", m, n))
				}
				sort.Strings(parts)
				fmt.Fprintf(cmd.OutOrStdout(), "sent %s to %s (%s)\n", plural(count, "message"), args[0], strings.Join(parts, ", "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&count, "count", 1, "number of messages")
	f.StringVar(&body, "body", "", "message body")
	f.IntVar(&size, "size", 0, "body of this many bytes")
	f.DurationVar(&ttl, "ttl", 0, "time to live, e.g. 30s (default: the queue's)")
	f.IntVar(&priority, "priority", 4, "priority, 0 (lowest) to 9 (highest)")
	f.StringVar(&dedupID, "dedup-id", "", "duplicate-detection id")
	f.BoolVar(&idempotent, "idempotent", false, "give each message without --dedup-id its message id as dedup id, so a send of unknown outcome is resent safely")
	property = propertyFlag(cmd)
	reconnect = reconnectFlag(cmd, client.ReconnectProducer)
	f.BoolVar(&asJSON, "json", false, "print one JSON line per message")
	return cmd
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
