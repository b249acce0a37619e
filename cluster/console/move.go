package console

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cairnmq/cairn/client"
)

// messageLine is a message as cairn queue browse --json prints it.
type messageLine struct {
	ID            string         `json:"id"`
	Member        string         `json:"member"`
	Body          string         `json:"body"`
	Redelivered   bool           `json:"redelivered"`
	DeliveryCount int            `json:"delivery_count"`
	Priority      int            `json:"priority"`
	Properties    map[string]any `json:"properties,omitempty"`
}

// browse lists up to 100 of a queue's pending messages.
func browse(ctx context.Context, a *client.Admin, queue string) ([]messageLine, error) {
	ms, err := a.BrowseQueue(ctx, queue, client.BrowseOptions{Count: 100})
	out := make([]messageLine, len(ms))
	for i, m := range ms {
		out[i] = messageLine{ID: m.ID, Member: m.Member, Body: string(m.Body), Redelivered: m.Redelivered,
			DeliveryCount: m.DeliveryCount, Priority: m.Priority, Properties: m.Properties}
	}
	return out, err
}

// receiveWait bounds how long a move waits for the message it browsed.
const receiveWait = 5 * time.Second

// move takes pending message id out of queue from and sends it to queue
// to, in one transaction: both or neither. The message sent has the
// other's body, properties, headers and priority, and a new id; it is
// delivered afresh (its delivery count starts again) and lives for ever.
// This moves a dead-lettered message back to the queue it died in.
func move(ctx context.Context, a *client.Admin, addr string, o client.Options, from, id, to string) error {
	if to == "" {
		return fmt.Errorf("%w: which queue should message %s go to? give it as ?to=QUEUE", client.ErrInvalidArgument, id)
	}
	sel := fmt.Sprintf("JMSMessageID = '%s'", strings.ReplaceAll(id, "'", "''"))
	found, err := a.BrowseQueue(ctx, from, client.BrowseOptions{Selector: sel, Count: 1})
	if err != nil {
		return err
	}
	if len(found) == 0 {
		return fmt.Errorf("%w: %s holds no pending message %s (taken meanwhile, or not there)", client.ErrUnknownDestination, from, id)
	}
	c, err := client.Dial(ctx, []string{addr}, o)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.Session(client.Transacted)
	if err != nil {
		return err
	}
	k, err := s.Consumer(ctx, found[0].Member, client.WithSelector(sel), client.WithPrefetch(1))
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, receiveWait)
	m, err := k.Receive(rctx)
	cancel()
	if err != nil {
		return fmt.Errorf("%w: message %s of %s was not delivered within %v (taken meanwhile?): %v", client.ErrUnknownDestination, id, from, receiveWait, err)
	}
	p, err := s.Producer(to)
	if err != nil {
		return err
	}
	if err := p.SetPriority(m.Priority); err != nil {
		return err
	}
	if _, err := p.Send(ctx, &client.Message{Body: m.Body, Properties: m.Properties, CorrelationID: m.CorrelationID, Type: m.Type, ReplyTo: m.ReplyTo}); err != nil {
		return err
	}
	return s.Commit(ctx)
}
