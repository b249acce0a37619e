package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnmq/cairn/client"
)

// receiveLine is one line of `cairn receive --json`.
type receiveLine struct {
	ID            string         `json:"id"`
	Member        string         `json:"member"`
	Body          string         `json:"body"`
	Redelivered   bool           `json:"redelivered"`
	DeliveryCount int            `json:"delivery_count"`
	Priority      int            `json:"priority"`
	Properties    map[string]any `json:"properties,omitempty"`
}

func receivedLine(m *client.Message) receiveLine {
	return receiveLine{ID: m.ID, Member: m.Member, Body: string(m.Body), Redelivered: m.Redelivered,
		DeliveryCount: m.DeliveryCount, Priority: m.Priority, Properties: m.Properties}
}

func receiveCmd() *cobra.Command {
	var (
		count     int
		ack       string
		timeout   time.Duration
		asJSON    bool
		selector  string
		reconnect *string
	)
	cmd := &cobra.Command{
		Use:   "receive DEST",
		Short: "Receive messages from a queue (DEST is NAME, or NAME#I for member I)",
		Long: `Receive up to --count messages. It exits when it has them or when --timeout
has passed (0: no limit), with status 0 either way; the lines say what it got.
An error that reconnecting cannot get past ends it at once, with status 1.

--ack auto     acknowledge each message as it is received (default)
--ack client   acknowledge each message after printing it
--ack none     never acknowledge: on exit the messages return to the queue,
               marked redelivered

--selector takes a JMS message selector: only the messages it selects are
received (the member's host chooses them), for example
  --selector "color = 'blue' AND weight > 2500"
  --selector "JMSPriority >= 7 OR region IN ('eu', 'us')"
It reads the properties and the headers JMSPriority, JMSMessageID,
JMSTimestamp, JMSCorrelationID, JMSType and JMSDeliveryMode.

With --json each message prints one line:
  {"id":"...","member":"orders#0","body":"...","redelivered":false,"delivery_count":1,"priority":4,"properties":{"color":"blue","weight":3000}}

When its node is lost, receive reconnects to another node and goes on
(--reconnect all, the default). Messages it held unacknowledged then come
again, marked redelivered; with --ack client the first acknowledge after a
reconnect reports that on stderr, and receive goes on.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 1 {
				return fmt.Errorf("--count %d: receive at least one message", count)
			}
			var mode client.AckMode
			switch ack {
			case "auto":
				mode = client.AutoAck
			case "client", "none":
				mode = client.ClientAck
			default:
				return fmt.Errorf("--ack %q: use auto, client or none", ack)
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			opts, err := dialOptions(*reconnect)
			if err != nil {
				return err
			}
			conn, err := client.Dial(ctx, servers(cmd), opts)
			if err != nil {
				return err
			}
			defer conn.Close()
			s, err := conn.Session(mode)
			if err != nil {
				return err
			}
			k, err := s.Consumer(ctx, args[0], client.WithLimit(count), client.WithSelector(selector))
			if err != nil {
				return err
			}
			out := newJSONLines(cmd.OutOrStdout())
			for got := 0; got < count; got++ {
				m, err := k.Receive(ctx)
				if errors.Is(err, context.DeadlineExceeded) && timeout > 0 {
					return nil
				}
				if err != nil {
					return err
				}
				if asJSON {
					err = out.write(receivedLine(m))
				} else {
					_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s  %s  priority=%d delivery_count=%d redelivered=%v  %s\n",
						m.ID, m.Member, m.Priority, m.DeliveryCount, m.Redelivered, m.Body)
				}
				if err != nil {
					return err
				}
				if ack == "client" {
					err := m.Ack()
					if errors.Is(err, client.ErrLostServer) {
						// The connection lost its node, which released what
						// the session held: those messages come again,
						// marked redelivered, after the reconnect (and if it
						// fails, the next receive says so).
						fmt.Fprintf(cmd.ErrOrStderr(), "cairn: %v\n", err)
						continue
					}
					if err != nil {
						return fmt.Errorf("acknowledging %s: %w", m.ID, err)
					}
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&count, "count", 1, "number of messages to receive")
	f.StringVar(&ack, "ack", "auto", "auto, client or none")
	f.DurationVar(&timeout, "timeout", 0, "bound on the whole command, e.g. 5s (0: wait for --count messages)")
	f.BoolVar(&asJSON, "json", false, "print one JSON line per message")
	f.StringVar(&selector, "selector", "", "receive only the messages this JMS selector selects, e.g. \"color = 'blue'\"")
	reconnect = reconnectFlag(cmd, client.ReconnectAll)
	return cmd
}
