package test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
)

// Issue 4 on three real processes. Idempotent producers on the two other
// front-ends send to member dd#0 while its host is killed with SIGKILL:
// no send ends with an unknown outcome (the front-ends resend to the new
// host, whose dedup window drops copies) and, the killed node back, every
// message is stored exactly once. Then the queue is consumed only through
// member dd#1 (`cairn receive dd#1`): the other members, left without
// consumers, forward their messages to it after the default forward delay,
// so it alone hands out every message once.
func TestCluster3_DD_IdempotentSendsThroughSIGKILLThenStrandedMembersDrain(t *testing.T) {
	c := newCluster(t)
	c.startAll()
	c.waitSettled(20 * time.Second)
	host := c.createQueue("dd", 3).Members[0].Host
	hi, hs := c.node(host)

	const perProducer = 150
	var mu sync.Mutex
	var sent []string
	var unknown, failed []string
	duplicates := 0 // receipts of a resend whose first copy had been stored
	var wg sync.WaitGroup
	started := make(chan struct{}, 2)
	for _, i := range []int{(hi + 1) % 3, (hi + 2) % 3} {
		conn := c.dialNode(i)
		defer conn.Close()
		s, err := conn.Session(client.AutoAck)
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.Producer("dd#0")
		if err != nil {
			t.Fatal(err)
		}
		p.SetIdempotent(true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range perProducer {
				body := fmt.Sprintf("%s-%d", c.nodes[i].nodeID, k)
				ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
				r, err := p.Send(ctx, &client.Message{Body: []byte(body)})
				cancel()
				mu.Lock()
				switch {
				case err == nil:
					sent = append(sent, body)
					if r.Duplicate {
						duplicates++
					}
				case errors.Is(err, client.ErrDeliveryUnknown):
					unknown = append(unknown, fmt.Sprintf("%s: %v", body, err))
				default:
					failed = append(failed, fmt.Sprintf("%s: %v", body, err))
				}
				mu.Unlock()
				if k == 20 {
					started <- struct{}{}
				}
			}
		}()
	}
	<-started
	<-started
	hs.kill()
	t.Logf("killed %s, the host of dd#0, while two idempotent producers sent to it", host)
	wg.Wait()
	if len(unknown) > 0 || len(failed) > 0 {
		t.Fatalf("idempotent sends through the kill: %d unknown (%v), %d failed (%v)", len(unknown), unknown, len(failed), failed)
	}
	t.Logf("%d sends ok, %d of them answered by a resend as duplicates", len(sent), duplicates)
	hs.start()
	c.waitSettled(30 * time.Second)

	// Every message only through dd#1; dd#0's come to it by forwarding.
	env := []string{"CAIRN_SERVER=" + c.nodes[0].addrs.client}
	out := mustOK(t, env, "receive", "dd#1", "--count", fmt.Sprint(len(sent)), "--timeout", "60s", "--json").stdout
	got := map[string]int{}
	for _, line := range jsonLines(t, out) {
		got[fmt.Sprint(line["body"])]++
		if line["member"] != "dd#1" {
			t.Errorf("received %v from %v; want dd#1", line["body"], line["member"])
		}
	}
	for _, b := range sent {
		if got[b] != 1 {
			t.Errorf("%s: received %d times; want once", b, got[b])
		}
	}
	if len(got) != len(sent) {
		t.Errorf("received %d distinct messages; sent %d", len(got), len(sent))
	}
	q := c.nodes[0].showQueue("dd")
	if q.Pending != 0 || q.Delivered != 0 {
		t.Errorf("after the drain: %+v", q)
	}
}
