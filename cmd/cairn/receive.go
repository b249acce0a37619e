package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnmq/cairn/client"
)

// receiveLine is one line of `cairn receive --json` and of `cairn
// subscribe --json` (with subscription).
type receiveLine struct {
	ID            string         `json:"id"`
	Member        string         `json:"member"`
	Subscription  *string        `json:"subscription,omitempty"`
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
	return receiveOrSubscribeCmd(false)
}

func subscribeCmd() *cobra.Command {
	return receiveOrSubscribeCmd(true)
}

// receiveOrSubscribeCmd is cairn receive, or with subscribe cairn
// subscribe: the same flags, acknowledgements and output, from a queue or
// from a subscription to a topic.
func receiveOrSubscribeCmd(subscribe bool) *cobra.Command {
	f := &receiveFlags{subscribe: subscribe}
	use, short, long := "receive DEST", "Receive messages from a queue (DEST is NAME, or NAME#I for member I)", "Receive messages from a queue."
	if subscribe {
		use, short = "subscribe TOPIC", "Receive messages published to a topic, through a subscription"
		long = `Receive messages published to a topic through a subscription, made if it
does not exist: without --subscription a non-durable one, which lives as
long as the command and gets what is published meanwhile; with
--subscription NAME --durable one kept across disconnects and restarts
(unshared, it needs --client-id and takes one consumer at a time); with
--shared one whose consumers share its messages. --selector is the
subscription's, set when it is made. With --json lines also carry
"subscription": its name, or a non-durable one's own (TOPIC::ID).`
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: long + `

It takes up to --count messages. It exits when it has them or when --timeout
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

When its node is lost, it reconnects to another node and goes on
(--reconnect all, the default). Messages it held unacknowledged then come
again, marked redelivered; with --ack client the first acknowledge after a
reconnect reports that on stderr, and it goes on.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return f.run(cmd, args[0]) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.count, "count", 1, "number of messages to receive")
	fl.StringVar(&f.ack, "ack", "auto", "auto, client or none")
	fl.DurationVar(&f.timeout, "timeout", 0, "bound on the whole command, e.g. 5s (0: wait for --count messages)")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON line per message")
	fl.StringVar(&f.selector, "selector", "", "receive only the messages this JMS selector selects, e.g. \"color = 'blue'\"")
	f.reconnect = reconnectFlag(cmd, client.ReconnectAll)
	if f.subscribe {
		fl.StringVar(&f.sub.Name, "subscription", "", "the subscription's name (a durable or shared one)")
		fl.BoolVar(&f.sub.Durable, "durable", false, "a durable subscription, kept while nobody consumes it")
		fl.BoolVar(&f.sub.Shared, "shared", false, "a shared subscription: its consumers share its messages")
		fl.StringVar(&f.clientID, "client-id", "", "the connection's client id, which scopes an unshared durable subscription")
	}
	return cmd
}

// consumer connects and makes the consumer (or subscriber) the flags say.
func (f *receiveFlags) consumer(ctx context.Context, cmd *cobra.Command, mode client.AckMode, dest string) (*client.Connection, *client.Consumer, error) {
	opts, err := dialOptions(cmd, *f.reconnect)
	if err != nil {
		return nil, nil, err
	}
	opts.ClientID = f.clientID
	conn, err := client.Dial(ctx, servers(cmd), opts)
	if err != nil {
		return nil, nil, err
	}
	k, err := func() (*client.Consumer, error) {
		s, err := conn.Session(mode)
		if err != nil {
			return nil, err
		}
		if f.subscribe {
			return s.Subscribe(ctx, dest, f.sub, client.WithLimit(f.count), client.WithSelector(f.selector))
		}
		return s.Consumer(ctx, dest, client.WithLimit(f.count), client.WithSelector(f.selector))
	}()
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, k, nil
}

// receiveFlags are cairn receive's and cairn subscribe's flags.
type receiveFlags struct {
	subscribe bool
	count     int
	ack       string
	timeout   time.Duration
	asJSON    bool
	selector  string
	reconnect *string
	sub       client.Subscription
	clientID  string
}

// run receives from dest (or subscribes to it) as the flags say.
func (f *receiveFlags) run(cmd *cobra.Command, dest string) error {
	if f.count < 1 {
		return fmt.Errorf("--count %d: receive at least one message", f.count)
	}
	var mode client.AckMode
	switch f.ack {
	case "auto":
		mode = client.AutoAck
	case "client", "none":
		mode = client.ClientAck
	default:
		return fmt.Errorf("--ack %q: use auto, client or none", f.ack)
	}
	ctx := cmd.Context()
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	conn, k, err := f.consumer(ctx, cmd, mode, dest)
	if err != nil {
		return err
	}
	defer conn.Close()
	var subName *string
	if f.subscribe {
		name := f.sub.Name
		if name == "" {
			name, _, _ = strings.Cut(k.Member(), "#")
		}
		subName = &name
	}
	out := newJSONLines(cmd.OutOrStdout())
	for got := 0; got < f.count; got++ {
		m, err := k.Receive(ctx)
		if errors.Is(err, context.DeadlineExceeded) && f.timeout > 0 {
			return nil
		}
		if err != nil {
			return err
		}
		if f.asJSON {
			line := receivedLine(m)
			line.Subscription = subName
			err = out.write(line)
		} else {
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s  %s  priority=%d delivery_count=%d redelivered=%v  %s\n",
				m.ID, m.Member, m.Priority, m.DeliveryCount, m.Redelivered, m.Body)
		}
		if err != nil {
			return err
		}
		if f.ack == "client" {
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
}
