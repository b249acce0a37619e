package member

import (
	"context"
	"time"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// Resolver learns a transaction's decision from its primary member. The
// cluster provides it: only the cluster knows where the primary is hosted.
type Resolver interface {
	// Decision asks the primary (NAME#I) for tx's decision, having it record
	// rollback if none was made.
	Decision(ctx context.Context, primary, tx string) (commit bool, err error)
}

// DefaultTxTimeout is how long a transaction may stay prepared before the
// member's host asks its primary for the decision: far longer than a
// front-end's two phases take, so only a transaction whose front-end died
// (or was cut off) waits for it.
const DefaultTxTimeout = 30 * time.Second

// resolvePrepared decides the transactions prepared here for longer than
// TxTimeout: the primary says the decision, or records rollback when its
// front-end never decided.
func (r *Replica) resolvePrepared() {
	if r.cfg.Resolver == nil {
		return
	}
	now := r.now().UnixNano()
	var due []fsm.Prepared
	r.host.fsm.read(r.key, func(m *fsm.Member) {
		for _, p := range m.PreparedTxs() {
			if now-p.PreparedAt >= int64(r.cfg.TxTimeout) {
				due = append(due, p)
			}
		}
	})
	for _, p := range due {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		commit, err := r.cfg.Resolver.Decision(ctx, p.Primary, p.Tx)
		if err == nil {
			err = r.propose(ctx, &fsmpb.TxDecide{Tx: p.Tx, Commit: commit, Now: r.now().UnixNano()})
		}
		cancel()
		if err != nil {
			r.log.Warn("could not learn a prepared transaction's decision; trying again", "tx", p.Tx, "primary", p.Primary, "err", err)
			continue
		}
		r.log.Info("decided a transaction its front-end left prepared", "tx", p.Tx, "primary", p.Primary, "commit", commit)
	}
}
