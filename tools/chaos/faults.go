package chaos

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/internal/channelsim"
)

// The faults a run injects. Each is recorded in the history when it starts and when it heals.
const (
	faultKillInstance  = "kill_instance"    // kill -9 an instance mid-traffic, restart it
	faultPauseInstance = "pause_instance"   // SIGSTOP an instance longer than the lock TTL, then SIGCONT (I10)
	faultRestartRedis  = "restart_redis"    // kill -9 a Redis server and start it again, empty
	faultKillMariaDB   = "kill_mariadb"     // kill -9 MariaDB and restart it (crash recovery)
	faultRedeliver     = "kafka_redelivery" // publish earlier notifications again
	faultChannel       = "channel_faults"   // the channel drops, duplicates and times out after applying
	faultKillKafka     = "kill_kafka"       // kill -9 the Kafka broker, restart it on its data (kafka.go)
)

// allFaults is the rotation of the fault scheduler.
// The run adds its mode's network faults (mode.netFaults) and, with -redis-cluster, the
// failovers.
var allFaults = []string{faultKillInstance, faultPauseInstance, faultRestartRedis, faultKillMariaDB, faultRedeliver, faultChannel, faultKillKafka}

// faulter injects faults into the world on a schedule.
type faulter struct {
	w       *world
	h       *history
	wl      *workload
	lockTTL time.Duration
	every   time.Duration
	// m is the merchant's receiver (its faults: hookfaults.go), own the faults the run must
	// inject (ownFaults): the rotation's first round starts with them.
	m   *merchant
	own []string

	mu     sync.Mutex
	counts map[string]int
}

// run injects one fault after another, every f.every, rotating through f.rotation() in a
// shuffled order so that every kind comes up once per round, until ctx ends. The first round
// starts with the run's own faults (f.own), so that a short run, which ends before its first
// round does, injects them all.
func (f *faulter) run(ctx context.Context) {
	sleepCtx(ctx, f.every/2)
	for round := 0; ctx.Err() == nil; round++ {
		faults := slices.Clone(f.rotation())
		if round == 0 {
			faults = firstRound(faults, f.own)
		} else {
			mrand.Shuffle(len(faults), func(i, j int) { faults[i], faults[j] = faults[j], faults[i] })
		}
		for _, kind := range faults {
			if ctx.Err() != nil {
				return
			}
			f.inject(ctx, kind)
			sleepCtx(ctx, f.every)
		}
	}
}

func (f *faulter) count(kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[kind]++
}

func (f *faulter) snapshot() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.counts {
		out[k] = v
	}
	return out
}

// record writes a fault event.
func (f *faulter) record(kind, detail string, err error) {
	e := &event{Kind: kindFault, Op: kind, Detail: detail}
	if err != nil {
		e.Err = err.Error()
	}
	f.h.add(e)
}

// inject runs one fault to its end (the fault healed), but for channel faults, which stay
// on for a while in the background.
func (f *faulter) inject(ctx context.Context, kind string) {
	f.count(kind)
	if f.injectGalera(ctx, kind) || f.injectNetwork(ctx, kind) || f.injectReceiver(ctx, kind) {
		return
	}
	// Restarts use a context of their own: a fault that began must heal, even when the run
	// is being stopped.
	heal := context.WithoutCancel(ctx)
	switch kind {
	case faultKillInstance:
		in := f.w.insts[mrand.IntN(len(f.w.insts))]
		in.signal(syscall.SIGCONT)
		in.kill()
		f.record(kind, fmt.Sprintf("kill -9 oncepay-%d", in.n), nil)
		sleepCtx(ctx, time.Duration(500+mrand.IntN(2000))*time.Millisecond)
		err := in.start(heal)
		f.record(kind+"_healed", fmt.Sprintf("oncepay-%d restarted", in.n), err)
	case faultPauseInstance:
		in := f.w.insts[mrand.IntN(len(f.w.insts))]
		pause := f.lockTTL*2 + time.Duration(mrand.IntN(1000))*time.Millisecond
		in.signal(syscall.SIGSTOP)
		f.record(kind, fmt.Sprintf("SIGSTOP oncepay-%d for %s (lock TTL %s)", in.n, pause, f.lockTTL), nil)
		sleepCtx(heal, pause)
		in.signal(syscall.SIGCONT)
		f.record(kind+"_healed", fmt.Sprintf("SIGCONT oncepay-%d", in.n), nil)
	case faultRestartRedis:
		s := f.w.redis[mrand.IntN(len(f.w.redis))]
		s.kill()
		f.record(kind, "kill -9 "+s.name+" (restarts empty)", nil)
		sleepCtx(ctx, time.Duration(300+mrand.IntN(1000))*time.Millisecond)
		err := s.start(heal)
		f.record(kind+"_healed", s.name+" restarted empty", err)
	case faultKillMariaDB:
		f.crashAndRestart(ctx, heal, kind, f.w.mariadb, "mariadb restarted, crash recovery and")
	case faultKillKafka:
		// The outbox relays' publishes and the workload's Kafka copies fail meanwhile and are
		// retried; the consumer group loses its coordinator, and its members join again and
		// resume from the offsets they had committed (docs/chaos.md, kill_kafka).
		f.crashAndRestart(ctx, heal, kind, f.w.broker, "kafka restarted on its data directory,")
	case faultKillRedisMaster, faultFailoverForce:
		f.injectRedisCluster(ctx, heal, kind)
	case faultRedeliver:
		n := f.wl.redeliver(ctx, 25)
		f.record(kind, fmt.Sprintf("%d earlier notifications published again", n), nil)
	case faultChannel:
		faults := channelsim.Faults{DropNotifications: 0.3, DuplicateNotifications: 2, TimeoutAfterApply: 0.2, FailBeforeApply: 0.1}
		f.w.sim.SetFaults(faults)
		f.record(kind, "channel: drop 30% of notifications, 2 extra copies, 20% timeout after apply, 10% 503 before apply", nil)
		go func() {
			sleepCtx(heal, 2*f.every)
			f.w.sim.SetFaults(channelsim.Faults{})
			f.record(kind+"_healed", "channel faults cleared", nil)
		}()
	}
}

// crashAndRestart kills s with -9 mid-traffic, leaves it down 1–3 s, then starts it again on
// the same port and data directory, and records both, the healing with how long s took to be
// ready again (healed says what it did: "mariadb restarted, crash recovery and").
func (f *faulter) crashAndRestart(ctx, heal context.Context, kind string, s *server, healed string) {
	s.kill()
	f.record(kind, "kill -9 "+s.name, nil)
	sleepCtx(ctx, time.Duration(1000+mrand.IntN(2000))*time.Millisecond)
	start := time.Now()
	err := s.start(heal)
	f.record(kind+"_healed", fmt.Sprintf("%s ready in %s", healed, time.Since(start).Round(time.Millisecond)), err)
}
