package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/client/history"
)

// checkHistoryFile judges the history a queue's run recorded (--history)
// as the run would have: the same rules and the same minimums.
func checkHistoryFile(cfg verifyConfig) (verifyReport, error) {
	f, err := os.Open(cfg.check)
	if err != nil {
		return verifyReport{}, err
	}
	defer f.Close()
	h, seen, took, err := replayHistory(f, &cfg)
	if err != nil {
		return verifyReport{}, fmt.Errorf("%s: %w", cfg.check, err)
	}
	cfg.queue, cfg.duration = cfg.check, took
	return report(cfg.queue, cfg, h, seen), nil
}

// replayHistory rebuilds a run's history from its events, what its
// connections observed and how long it took from its first event to its
// last; a file with a transaction's events was a run with --transactions.
func replayHistory(f io.Reader, cfg *verifyConfig) (*history.History, observed, time.Duration, error) {
	h := history.New()
	var seen observed
	var first, lastAt time.Time
	// last is each message's last receipt in each phase: an ack event
	// acknowledges it.
	type key struct{ id, phase string }
	last := map[key]*history.Receipt{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, observed{}, 0, fmt.Errorf("line %d is not an event of cairn verify --history: %w", line, err)
		}
		if first.IsZero() {
			first = e.Time
		}
		lastAt = e.Time
		err := outcomeError(e)
		switch {
		case e.Op == "reconnect":
			seen.reconnects++
		case err != nil && e.Op != "rollback":
			seen.errors++
		}
		if e.Tx != "" {
			cfg.transactions = true
		}
		switch e.Op {
		case "send":
			if e.Tx != "" {
				h.SentInTx(e.Tx, e.ID)
				continue
			}
			h.Sending(e.ID)
			h.Sent(e.ID, err)
		case "receive":
			m := &client.Message{ID: e.ID, Redelivered: e.Redelivered, DeliveryCount: e.DeliveryCount}
			if e.Tx != "" {
				h.ReceivedInTx(e.Tx, e.Phase, m)
				continue
			}
			last[key{e.ID, e.Phase}] = h.Received(e.Phase, m)
		case "ack":
			r := last[key{e.ID, e.Phase}]
			if r == nil {
				return nil, observed{}, 0, fmt.Errorf("line %d acknowledges %s in %s, which was not received there", line, e.ID, e.Phase)
			}
			h.Acked(r, err)
		case "commit", "rollback":
			h.Committed(e.Tx, err)
		case "reconnect":
		default:
			return nil, observed{}, 0, fmt.Errorf("line %d has op %q, not one of send, receive, ack, commit, rollback, reconnect", line, e.Op)
		}
	}
	return h, seen, lastAt.Sub(first).Round(time.Millisecond), sc.Err()
}

// outcomeError is the error an event's outcome stands for: the kind the
// history tells apart (unknown, rolled back, definite).
func outcomeError(e event) error {
	detail := e.Error
	if detail == "" {
		detail = "as recorded"
	}
	switch e.Outcome {
	case "", "ok":
		return nil
	case "unknown":
		if e.Op == "commit" {
			return fmt.Errorf("%w: %s", client.ErrCommitUnknown, detail)
		}
		return fmt.Errorf("%w: %s", client.ErrDeliveryUnknown, detail)
	case "rolled-back":
		return fmt.Errorf("%w: %s", client.ErrTransactionRolledBack, detail)
	}
	return errors.New(detail)
}
