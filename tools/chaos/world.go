package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-retry"

	"github.com/oncepay/oncepay/internal/channelsim"
	"github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/testsupport/netfault"
)

// world is everything a chaos run starts on this machine and tears down afterwards: a private
// MariaDB server, a private Redis (one server or a three-node cluster), the Kafka broker (a
// process of its own, kafka.go), the channel simulator, an nginx gateway in front of the
// oncepay instances (gateway.go: the address the clients and the channel's notifications go
// to) and the oncepay instances themselves. Nothing of it touches a server it did not start.
type world struct {
	dir     string
	mariadb *server
	redis   []*server
	kafka   *kafka.Cluster
	sim     *channelsim.Sim
	simURL  string
	simSrv  *http.Server
	gw      *gateway
	insts   []*instance
	users   []user
	// clustered is set once the Redis nodes were joined into a cluster.
	clustered bool
	// galera, with -galera, is the three-node cluster that stands for mariadb (galera.go).
	galera *galeraWorld
	// net is the toxiproxy between the instances and MariaDB, Redis and the channel, and
	// routes are each instance's proxies (network.go).
	net    *netfault.Net
	routes map[int]routes
	// kafkaProxy stands between the broker and all its clients (kafka.go).
	kafkaProxy *netfault.Proxy
	// broker is the Kafka broker's process (kafka.go); kafka holds its address, for the
	// instances and for the chaos process's own producer and reads.
	broker *server

	// secret and adminKey are fresh for every run: oncepay refuses the dev-* defaults on a
	// real database.
	secret   string
	adminKey string
}

// server is a child process the world can kill -9, stop, continue and start again with the
// same command line (the same port, the same data directory).
type server struct {
	name string
	args []string
	env  []string
	logf string
	// ready reports whether the restarted process serves; start waits for it.
	ready func(context.Context) error

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	// exits counts the times the process ended without the chaos run killing it.
	exits int
}

// start launches the process and waits until it is ready.
func (s *server) start(ctx context.Context) error {
	logf, err := os.OpenFile(s.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Env = append(os.Environ(), s.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A process group of its own: a Ctrl-C of the chaos run reaches the chaos run, which
	// tears the world down in order, not every child at once.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		s.mu.Lock()
		if s.cmd == cmd { // not killed by the chaos run: it died by itself
			s.exits++
		}
		s.mu.Unlock()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := s.ready(ctx); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("%s is not ready after 60 s (log %s): %w", s.name, s.logf, err)
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited at start-up; its log is %s", s.name, s.logf)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// signal sends sig to the running process; it reports false when none runs.
func (s *server) signal(sig syscall.Signal) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return false
	}
	return s.cmd.Process.Signal(sig) == nil
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *server) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// running reports whether the process exists (it may be stopped).
func (s *server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// instance is one oncepay process.
type instance struct {
	*server
	n    int
	base string
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// worldOptions are the parts of the world a run chooses.
type worldOptions struct {
	dir          string
	oncepayBin   string
	instances    int
	redisCluster bool
	// gateway is the address the nginx gateway listens on (-gateway).
	gateway  string
	lockTTL  time.Duration
	orderTTL time.Duration
	// slowPayment is ONCEPAY_CHAOS_PAYMENT_DELAY on the last instance: its payments hold
	// their lock longer than the lock's TTL, so only the watchdog keeps it.
	slowPayment time.Duration
	// galera runs the database as a three-node Galera cluster (galera.go).
	galera galeraOptions
}

// startWorld starts every part in dependency order. On error it tears down what it started.
func startWorld(ctx context.Context, opts worldOptions) (_ *world, err error) {
	w := &world{dir: opts.dir, secret: "chaos-channel-" + randomHex(12), adminKey: "chaos-admin-" + randomHex(12)}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	if opts.galera.on {
		err = w.startGalera(ctx, opts.galera)
	} else {
		err = w.startMariaDB(ctx)
	}
	if err != nil {
		return nil, err
	}
	if err := w.startRedis(ctx, opts.redisCluster); err != nil {
		return nil, err
	}
	if err := w.startKafka(ctx); err != nil {
		return nil, err
	}
	if err := w.startSim(); err != nil {
		return nil, err
	}
	if w.users, err = w.seed(ctx); err != nil {
		return nil, fmt.Errorf("seed the chaos database: %w", err)
	}
	listen, err := gatewayListen(opts.gateway)
	if err != nil {
		return nil, err
	}
	w.gw = newGateway(w.dir, listen)
	var upstreams []string
	for n := 1; n <= opts.instances; n++ {
		in, err := w.newInstance(n, opts)
		if err != nil {
			return nil, err
		}
		w.insts = append(w.insts, in)
		upstreams = append(upstreams, strings.TrimPrefix(in.base, "http://"))
	}
	if err := w.gw.start(ctx, upstreams); err != nil {
		return nil, err
	}
	// One at a time: the first runs the migrations, the others find them applied.
	for _, in := range w.insts {
		if err := in.start(ctx); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// mariadbPort is the private server's port, kept for restarts.
func (w *world) mysqlDSN(db string) string {
	if w.galera != nil {
		return w.galeraDSN(1, db)
	}
	return fmt.Sprintf("root:@tcp(%s)/%s?parseTime=true&loc=UTC&timeout=2s&readTimeout=10s&writeTimeout=10s", w.mariadb.addr(), db)
}

// addr returns the 127.0.0.1:port a server listens on (its --port argument).
func (s *server) addr() string {
	for _, a := range s.args {
		if p, ok := strings.CutPrefix(a, "--port="); ok {
			return "127.0.0.1:" + p
		}
	}
	for i, a := range s.args {
		if a == "--port" && i+1 < len(s.args) {
			return "127.0.0.1:" + s.args[i+1]
		}
	}
	return ""
}

// startMariaDB initialises a data directory with mariadb-install-db and starts mariadbd on
// a free port. Grant tables are skipped: the server listens on loopback only and lives for
// one run.
func (w *world) startMariaDB(ctx context.Context) error {
	datadir := filepath.Join(w.dir, "mariadb")
	install := exec.CommandContext(ctx, "mariadb-install-db", "--no-defaults", "--datadir="+datadir,
		"--user="+currentUser(), "--auth-root-authentication-method=normal", "--skip-test-db")
	if out, err := install.CombinedOutput(); err != nil {
		return fmt.Errorf("mariadb-install-db: %w\n%s", err, tail(string(out), 2000))
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	w.mariadb = &server{
		name: "mariadb",
		args: []string{"mariadbd", "--no-defaults", "--datadir=" + datadir, fmt.Sprintf("--port=%d", port),
			// A tmpdir of its own: at every start mariadbd deletes the temporary files in its
			// tmpdir, and the default, /tmp, may hold another server's.
			"--tmpdir=" + w.dir,
			"--socket=" + filepath.Join(w.dir, "mariadb.sock"), "--bind-address=127.0.0.1", "--user=" + currentUser(),
			"--skip-grant-tables", "--innodb-buffer-pool-size=128M", "--max-connections=1000",
			"--log-error=" + filepath.Join(w.dir, "mariadb.err")},
		logf: filepath.Join(w.dir, "mariadb.log"),
	}
	w.mariadb.ready = func(ctx context.Context) error {
		c, err := net.DialTimeout("tcp", w.mariadb.addr(), 200*time.Millisecond)
		if err != nil {
			return err
		}
		c.Close()
		return w.exec(ctx, "", "CREATE DATABASE IF NOT EXISTS oncepay")
	}
	return w.mariadb.start(ctx)
}

// currentUser is the user mariadbd runs as (it refuses root unless told).
func currentUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if os.Geteuid() == 0 {
		return "root"
	}
	return strconv.Itoa(os.Geteuid())
}

// startRedis starts one redis-server, or with cluster a Redis Cluster of three masters and
// three replicas (startRedisCluster, rediscluster.go).
func (w *world) startRedis(ctx context.Context, cluster bool) error {
	if cluster {
		return w.startRedisCluster(ctx)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	s := &server{name: "redis-1", logf: filepath.Join(w.dir, "redis-1.log"), args: []string{"redis-server", "--port", strconv.Itoa(port),
		"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", w.dir, "--daemonize", "no"}}
	s.ready = func(ctx context.Context) error {
		c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		defer c.Close()
		return c.Ping(ctx).Err()
	}
	w.redis = append(w.redis, s)
	return s.start(ctx)
}

// redisAddrs is ONCEPAY_REDIS_ADDR: one address, or the cluster's comma list.
func (w *world) redisAddrs() string {
	var addrs []string
	for _, s := range w.redis {
		addrs = append(addrs, s.addr())
	}
	return strings.Join(addrs, ",")
}

// redisClient is a client of the world's Redis, for the checker.
func (w *world) redisClient() redis.UniversalClient {
	var addrs []string
	for _, s := range w.redis {
		addrs = append(addrs, s.addr())
	}
	if len(addrs) == 1 {
		return redis.NewClient(&redis.Options{Addr: addrs[0]})
	}
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
}

// startSim starts the channel simulator in this process, on a free port, with a quick retry
// schedule so that a notification lost to a killed instance comes back within seconds.
func (w *world) startSim() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	w.simURL = "http://" + l.Addr().String()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	w.sim, err = channelsim.New(channelsim.Config{
		Secret:    w.secret,
		Schedule:  []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second, 5 * time.Second, 10 * time.Second, 10 * time.Second, 30 * time.Second},
		PublicURL: w.simURL,
		Logger:    quiet,
		Client:    &http.Client{Timeout: 3 * time.Second},
	})
	if err != nil {
		return err
	}
	w.simSrv = &http.Server{Handler: w.sim.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = w.simSrv.Serve(l) }()
	return nil
}

// newInstance describes oncepay instance n; it does not start it.
func (w *world) newInstance(n int, opts worldOptions) (*instance, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// Every instance reaches MariaDB, Redis and the channel through proxies of its own, where
	// the network faults strike (network.go).
	dsn, err := w.routeDSN(n, w.instanceDSN(n))
	if err != nil {
		return nil, err
	}
	redisEnv, err := w.routeRedis(n)
	if err != nil {
		return nil, err
	}
	channelURL, err := w.routeChannelURL(n)
	if err != nil {
		return nil, err
	}
	env := []string{
		"ONCEPAY_HTTP_ADDR=" + addr,
		"ONCEPAY_NODE_ID=" + strconv.Itoa(n),
		"ONCEPAY_MYSQL_DSN=" + dsn,
		"ONCEPAY_KAFKA_BROKERS=" + strings.Join(w.kafka.Brokers, ","),
		"ONCEPAY_CHANNEL_URL=" + channelURL,
		"ONCEPAY_CHANNELS=simpay",
		"ONCEPAY_CHANNEL_SECRET=" + w.secret,
		"ONCEPAY_ADMIN_KEY=" + w.adminKey,
		// Every instance seals and opens the webhook secrets with one key ring.
		"ONCEPAY_WEBHOOK_KEYS=" + webhookKeys(w.secret),
		"ONCEPAY_PUBLIC_URL=" + w.gw.base(),
		"ONCEPAY_DATA_DIR=" + filepath.Join(w.dir, fmt.Sprintf("oncepay-%d", n)),
		"ONCEPAY_SEED_DEMO=false",
		"ONCEPAY_LOCK_TTL=" + opts.lockTTL.String(),
		"ONCEPAY_ORDER_TTL=" + opts.orderTTL.String(),
		"ONCEPAY_CLOSE_JOB_INTERVAL=3s",
		"ONCEPAY_RECONCILE_JOB_INTERVAL=4s",
		"ONCEPAY_REFUND_JOB_INTERVAL=4s",
		"ONCEPAY_CHANNEL_TIMEOUT=1s",
		"ONCEPAY_CHANNEL_RETRIES=2",
		// The merchant's receiver runs in the chaos process on a loopback http URL.
		"ONCEPAY_WEBHOOK_DEV=true",
		"ONCEPAY_WEBHOOK_SCHEDULE=" + hookSchedule,
		"ONCEPAY_WEBHOOK_TIMEOUT=" + hookTimeout.String(),
	}
	env = append(env, redisEnv...)
	env = append(env, w.instanceEnv()...)
	env = append(env, clockEnv(n)...)
	if n == opts.instances && opts.slowPayment > 0 {
		env = append(env, "ONCEPAY_CHAOS_PAYMENT_DELAY="+opts.slowPayment.String())
	}
	in := &instance{n: n, base: "http://" + addr}
	in.server = &server{
		name: fmt.Sprintf("oncepay-%d", n),
		args: []string{opts.oncepayBin},
		env:  env,
		logf: filepath.Join(w.dir, fmt.Sprintf("oncepay-%d.log", n)),
	}
	in.ready = func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, in.base+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	}
	return in, nil
}

// close stops everything the world started, instances first.
func (w *world) close() {
	for _, in := range w.insts {
		in.signal(syscall.SIGCONT)
		in.kill()
	}
	w.stopGateway()
	w.closeNetwork()
	if w.simSrv != nil {
		_ = w.simSrv.Close()
	}
	if w.sim != nil {
		_ = w.sim.Close()
	}
	w.stopKafka()
	for _, s := range w.redis {
		s.kill()
	}
	if w.mariadb != nil {
		w.mariadb.kill()
	}
	if w.galera != nil {
		w.galera.cluster.Stop()
	}
}

// waitFor calls fn every 100 ms until it succeeds. It returns fn's last error once d has
// passed, or ctx's error when ctx ends first.
func waitFor(ctx context.Context, d time.Duration, fn func(context.Context) error) error {
	return retry.Do(ctx, retry.WithMaxDuration(d, retry.NewConstant(100*time.Millisecond)), func(ctx context.Context) error {
		return retry.RetryableError(fn(ctx))
	})
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// webhookKeys is the instances' ONCEPAY_WEBHOOK_KEYS: one key, derived from the run's channel
// secret, so that every instance opens what another sealed.
func webhookKeys(secret string) string {
	sum := sha256.Sum256([]byte("webhook keys " + secret))
	return "chaos:" + base64.StdEncoding.EncodeToString(sum[:])
}
