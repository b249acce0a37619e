package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"runtime"
	"sync"

	"golang.org/x/crypto/bcrypt"

	"github.com/cairnmq/cairn/transport"
)

// passwords checks passwords against users' bcrypt hashes without letting
// the checks take the node. bcrypt is slow on purpose (50-90 ms a check at
// the default cost on a 2-core machine, far more under the race detector),
// so:
//
//   - a check's verdict, right or wrong, is remembered under the hash it was
//     made against: a client that logs in again, or one that retries a
//     stale password in a loop, costs a keyed SHA-256, not a bcrypt; a new
//     hash (cairn user passwd) forgets both;
//   - checks of the same password for the same user at the same moment (a
//     client's pool of connections opening together) share one bcrypt;
//   - at most half the cores (one at least) run bcrypt at once; other checks
//     wait for a turn as long as their call lets them, so a flood of wrong
//     passwords leaves the other cores to the calls of users already checked.
type passwords struct {
	// key makes what is remembered of a password a keyed hash, drawn at
	// start: a memory dump holds no plain SHA-256 of a password.
	key   [32]byte
	turns chan struct{}
	// compare is bcrypt's (tests count its calls).
	compare func(hash, password []byte) error

	mu    sync.Mutex
	users map[string]*checked
	// running are the checks under way, by what they check.
	running map[runningKey]*runningCheck
}

type runningKey struct {
	user, hash string
	sum        [32]byte
}

// runningCheck is a check under way; done is closed once it ran (ran,
// right set) or its caller left before its turn.
type runningCheck struct {
	done       chan struct{}
	ran, right bool
}

// checked is what a node remembers of a user's passwords, under the hash
// the user had when they were checked.
type checked struct {
	hash  string
	right [32]byte
	known bool // right holds the password that matched
	// wrong holds the last maxWrong passwords that did not match, oldest
	// first.
	wrong [][32]byte
}

const (
	// maxRemembered bounds the users remembered; past it, it starts over.
	maxRemembered = 10_000
	// maxWrong bounds the wrong passwords remembered per user.
	maxWrong = 8
)

func newPasswords() *passwords {
	p := &passwords{
		turns:   make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2)),
		compare: bcrypt.CompareHashAndPassword,
		users:   make(map[string]*checked),
		running: make(map[runningKey]*runningCheck),
	}
	if _, err := rand.Read(p.key[:]); err != nil {
		panic(fmt.Sprintf("auth: no randomness for the password cache's key: %v", err))
	}
	return p
}

// check reports whether password is the one hash was made from.
func (p *passwords) check(ctx context.Context, user string, hash []byte, password string) (bool, error) {
	mac := hmac.New(sha256.New, p.key[:])
	mac.Write([]byte(password))
	var sum [32]byte
	mac.Sum(sum[:0])
	key := runningKey{user: user, hash: string(hash), sum: sum}
	for {
		p.mu.Lock()
		if right, ok := p.rememberedLocked(key); ok {
			p.mu.Unlock()
			return right, nil
		}
		c, joined := p.running[key]
		if !joined {
			c = &runningCheck{done: make(chan struct{})}
			p.running[key] = c
		}
		p.mu.Unlock()
		if !joined {
			return p.run(ctx, key, c, hash, password)
		}
		select {
		case <-c.done:
			if c.ran {
				return c.right, nil
			}
			// Its caller left before its turn: this call runs it.
		case <-ctx.Done():
			return false, busy(ctx)
		}
	}
}

// run runs check c at its turn for the call of ctx, remembers its verdict
// and tells the calls that joined it; if the call ends before its turn,
// c ends without running and a joined call takes it over.
func (p *passwords) run(ctx context.Context, key runningKey, c *runningCheck, hash []byte, password string) (bool, error) {
	select {
	case p.turns <- struct{}{}:
	case <-ctx.Done():
		p.mu.Lock()
		delete(p.running, key)
		p.mu.Unlock()
		close(c.done)
		return false, busy(ctx)
	}
	right := p.compare(hash, []byte(password)) == nil
	<-p.turns
	p.mu.Lock()
	p.rememberLocked(key, right)
	delete(p.running, key)
	c.right, c.ran = right, true
	p.mu.Unlock()
	close(c.done)
	return right, nil
}

func busy(ctx context.Context) error {
	return fmt.Errorf("%w: the call ended while the node was checking passwords (%v)", transport.ErrUnavailable, ctx.Err())
}

// rememberedLocked is the remembered verdict on key, if any; p.mu held.
func (p *passwords) rememberedLocked(key runningKey) (right, ok bool) {
	c := p.users[key.user]
	if c == nil || c.hash != key.hash {
		return false, false
	}
	if c.known && hmac.Equal(c.right[:], key.sum[:]) {
		return true, true
	}
	for _, w := range c.wrong {
		if hmac.Equal(w[:], key.sum[:]) {
			return false, true
		}
	}
	return false, false
}

// rememberLocked remembers the verdict on key; p.mu held.
func (p *passwords) rememberLocked(key runningKey, right bool) {
	c := p.users[key.user]
	if c == nil || c.hash != key.hash {
		if len(p.users) >= maxRemembered {
			clear(p.users)
		}
		c = &checked{hash: key.hash}
		p.users[key.user] = c
	}
	if right {
		c.right, c.known = key.sum, true
		return
	}
	if len(c.wrong) == maxWrong {
		c.wrong = append(c.wrong[:0], c.wrong[1:]...)
	}
	c.wrong = append(c.wrong, key.sum)
}

// forget drops what is remembered of every user (a benchmark's first check).
func (p *passwords) forget() {
	p.mu.Lock()
	clear(p.users)
	p.mu.Unlock()
}
