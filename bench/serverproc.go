package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"
)

// The CPU figures come from /proc/<pid>/stat, whose utime and stime count clock ticks of
// 1/100 s on Linux (sysconf(_SC_CLK_TCK) is 100 on every architecture Go supports there).
const clockTick = 10 * time.Millisecond

func init() {
	extraVariants = append(extraVariants,
		variant{name: "server-orders-proc", baseline: "bare", start: startServerProc},
		variant{name: "server-orders-proc-1p", baseline: "bare", start: startServerProc1P},
	)
}

// startServerProc runs POST /v1/orders, a new key every time, against bin/oncepay in a
// process of its own — configured as in production: its background loops run, it logs at
// info to a file — so that the CPU it spends per order can be read from /proc apart from the
// load generator's, beside MariaDB's and Redis's.
func startServerProc(ctx context.Context, e *env) (target, func(), error) {
	return e.serverProcTarget(ctx, "proc")
}

// startServerProc1P is startServerProc with the server's Go runtime held to one processor
// (GOMAXPROCS=1): a probe of what the runtime's own thread handoffs cost a server that shares
// two cores with MariaDB, Redis and the load generator. With two processors, each round trip's
// wake-up can move a goroutine to another thread, and sysmon polls every 20 µs while a thread
// sits in a syscall; perf puts a third of the server's samples in the kernel's task switch.
func startServerProc1P(ctx context.Context, e *env) (target, func(), error) {
	return e.serverProcTarget(ctx, "proc1p", "GOMAXPROCS=1")
}

// serverProcTarget is the order request at the oncepay process name, started on first use
// with extra environment, and the CPU of that process, MariaDB and Redis.
func (e *env) serverProcTarget(ctx context.Context, name string, extra ...string) (target, func(), error) {
	p, err := e.oncepayProcess(ctx, name, extra...)
	if err != nil {
		return target{}, nil, err
	}
	t := serverTarget(e, p.url)
	t.cpu = cpuOfPIDs(p.pids)
	return t, func() {}, nil
}

// cpuOfPIDs reads the CPU time used so far by each process of pids, by name.
func cpuOfPIDs(pids map[string]int) func() (map[string]time.Duration, error) {
	return func() (map[string]time.Duration, error) {
		cpu := map[string]time.Duration{}
		for name, pid := range pids {
			d, err := processCPU(pid)
			if err != nil {
				return nil, fmt.Errorf("%s (pid %d): %w", name, pid, err)
			}
			cpu[name] = d
		}
		return cpu, nil
	}
}

// storePIDs finds the pids of MariaDB and Redis, when they run on this machine: the CPU of
// every variant is read for them, beside the bench process's own ("bench": the in-process
// servers and the load generator together).
func (e *env) storePIDs(ctx context.Context) map[string]int {
	pids := map[string]int{"bench": os.Getpid()}
	if pid, err := e.mariadbPID(ctx); err == nil {
		pids["mariadb"] = pid
	}
	if info, err := e.rdb.InfoMap(ctx, "server").Result(); err == nil {
		if n, err := strconv.Atoi(info["Server"]["process_id"]); err == nil {
			pids["redis"] = n
		}
	}
	return pids
}

// oncepayProc is bin/oncepay running for the bench, and the processes whose CPU is read.
type oncepayProc struct {
	url  string
	pids map[string]int
	err  error
}

// serverProcs are the oncepay processes of this bench by name, each started on first use and
// shared by every run; the variants run one at a time, so it needs no lock.
var serverProcs = map[string]*oncepayProc{}

// oncepayProcess starts, on first use of name, one oncepay process (startCluster) with extra
// environment, and finds the pids of MariaDB and Redis beside it.
func (e *env) oncepayProcess(ctx context.Context, name string, extra ...string) (*oncepayProc, error) {
	if p, ok := serverProcs[name]; ok {
		return p, p.err
	}
	p := &oncepayProc{}
	serverProcs[name] = p
	c, err := e.startCluster(ctx, name, 1, extra...)
	if err != nil {
		p.err = err
		return p, err
	}
	p.url = c.urls[0]
	p.pids = e.storePIDs(ctx)
	p.pids["server"] = c.pids[0]
	return p, nil
}

// cluster is n oncepay processes on one database and one Redis, as a deployment runs them.
type cluster struct {
	urls []string
	pids []int
	// db is the cluster's database, for counting what it did.
	db       *gorm.DB
	adminKey string
	// stop interrupts the processes, drops the database and deletes the Redis keys now
	// rather than when the environment closes (a storm of every run starts its own cluster).
	stop func()
}

// oncepayBinary builds cmd/oncepay once per bench process and returns its path.
func (e *env) oncepayBinary(ctx context.Context) (string, error) {
	if e.binary != "" {
		return e.binary, nil
	}
	dir, err := os.MkdirTemp("", "oncepay-bench-bin-")
	if err != nil {
		return "", err
	}
	e.defer1(func() { _ = os.RemoveAll(dir) })
	bin := filepath.Join(dir, "oncepay")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "github.com/oncepay/oncepay/cmd/oncepay")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build cmd/oncepay: %v\n%s", err, out)
	}
	e.binary = bin
	return bin, nil
}

// startCluster builds cmd/oncepay and starts n processes of it on a database of their own
// (oncepay_bench_<name>_<runID>), the bench's Redis under one prefix and an embedded Kafka
// each, configured as in production — their background loops run, they log at info to a
// file — one after the other, each once the one before is ready (the first migrates and seeds
// the demo data), and raises serverSKU's stock. Everything is undone by the cluster's stop, or
// when the environment closes. Every call has a database and a Redis prefix of its own
// (oncepay_bench_<name><n>_<runID>), so each run's storm starts on an empty store.
//
// extra is more environment for every process, after the defaults, so that it overrides them
// (os/exec keeps the last value of a duplicated variable).
func (e *env) startCluster(ctx context.Context, name string, n int, extra ...string) (c *cluster, err error) {
	bin, err := e.oncepayBinary(ctx)
	if err != nil {
		return nil, err
	}
	// The cluster's cleanups are collected apart from the environment's, run once by
	// whichever comes first: the cluster's stop or the environment's close.
	outer := e.cleanups
	e.cleanups = nil
	defer func() {
		own := e.cleanups
		e.cleanups = outer
		var once sync.Once
		stop := func() {
			once.Do(func() {
				for i := len(own) - 1; i >= 0; i-- {
					own[i]()
				}
			})
		}
		e.defer1(stop)
		if c != nil {
			c.stop = stop
		}
	}()
	e.clusters++
	name = fmt.Sprintf("%s%d", name, e.clusters)
	dir, err := os.MkdirTemp("", "oncepay-bench-"+name+"-")
	if err != nil {
		return nil, err
	}
	e.defer1(func() { _ = os.RemoveAll(dir) })
	dsn, err := e.createSchema(ctx, "oncepay_bench_"+name+"_"+e.runID)
	if err != nil {
		return nil, err
	}
	prefix := e.prefix + "srv-" + name + ":"
	e.defer1(func() { e.deleteRedisKeys(prefix + "*") })
	c = &cluster{adminKey: "bench-admin-" + randomHex(8)}
	secret := "bench-secret-" + randomHex(8)
	for i := range n {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		url := "http://" + addr
		pid, err := e.startInstance(ctx, bin, filepath.Join(dir, fmt.Sprintf("oncepay-%d", i+1)), url, append([]string{
			"ONCEPAY_HTTP_ADDR=" + addr,
			"ONCEPAY_NODE_ID=" + strconv.Itoa(i+1),
			"ONCEPAY_MYSQL_DSN=" + dsn.FormatDSN(),
			"ONCEPAY_REDIS_ADDR=" + e.redisAddr,
			"ONCEPAY_REDIS_PREFIX=" + prefix,
			"ONCEPAY_EMBEDDED_KAFKA_ADDR=127.0.0.1:0",
			"ONCEPAY_CHANNEL_URL=embedded",
			"ONCEPAY_EMBEDDED_CHANNEL_ADDR=127.0.0.1:0",
			"ONCEPAY_PUBLIC_URL=" + url,
			"ONCEPAY_CHANNEL_SECRET=" + secret,
			"ONCEPAY_ADMIN_KEY=" + c.adminKey,
			"ONCEPAY_WEBHOOK_KEYS=" + webhookKeys(secret),
			"ONCEPAY_SEED_DEMO=" + strconv.FormatBool(i == 0),
		}, extra...))
		if err != nil {
			return nil, err
		}
		c.urls, c.pids = append(c.urls, url), append(c.pids, pid)
	}
	if err := raiseStock(ctx, c.urls[0], c.adminKey); err != nil {
		return nil, err
	}
	if c.db, err = openGorm(dsn); err != nil {
		return nil, err
	}
	if _, err := ensureBenchUser(ctx, c.db); err != nil {
		return nil, err
	}
	e.defer1(func() {
		if sqlDB, err := c.db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	return c, nil
}

// startInstance starts bin with env in dir (its data directory, and its log file), waits
// until url answers /readyz, and returns its pid; the environment's close interrupts it.
func (e *env) startInstance(ctx context.Context, bin, dir, url string, env []string) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	logFile, err := os.Create(filepath.Join(dir, "oncepay.log"))
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(bin)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "ONCEPAY_DATA_DIR=" + filepath.Join(dir, "data")}, env...)
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return 0, err
	}
	e.defer1(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = logFile.Close()
	})
	if err := awaitReady(ctx, url, 60*time.Second); err != nil {
		log, _ := os.ReadFile(logFile.Name())
		return 0, fmt.Errorf("%w; its log:\n%s", err, tail(log, 2000))
	}
	return cmd.Process.Pid, nil
}

// mariadbPID reads the server's pid from its pid file, when the server runs on this machine.
func (e *env) mariadbPID(ctx context.Context) (int, error) {
	var file string
	if err := e.db.WithContext(ctx).Raw("SELECT @@pid_file").Scan(&file).Error; err != nil {
		return 0, err
	}
	if !filepath.IsAbs(file) {
		var datadir string
		if err := e.db.WithContext(ctx).Raw("SELECT @@datadir").Scan(&datadir).Error; err != nil {
			return 0, err
		}
		file = filepath.Join(datadir, file)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// processCPU is the CPU time (user and system) pid has used so far.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The second field, the command, is in parentheses and may hold spaces: the fields
	// after it start past the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("unreadable /proc stat")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// awaitReady polls url's /readyz until it answers 200 or d has passed.
func awaitReady(ctx context.Context, url string, d time.Duration) error {
	deadline := time.Now().Add(d)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
		res, err := client.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("oncepay at %s was not ready after %s (last: %v)", url, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freeAddr returns a free 127.0.0.1 port for a server to listen on.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// tail is the last n bytes of b.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// webhookKeys is the servers' ONCEPAY_WEBHOOK_KEYS: one key, derived from the channel secret,
// so that every server opens what another sealed.
func webhookKeys(secret string) string {
	sum := sha256.Sum256([]byte("webhook keys " + secret))
	return "bench:" + base64.StdEncoding.EncodeToString(sum[:])
}
