package testenv

import (
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// FreeAddr returns a loopback address whose port was free a moment ago.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// StartProcess starts the oncepay binary bin with env, which must set ONCEPAY_HTTP_ADDR to
// addr, and waits until its /healthz answers 200. When the test ends it stops the process
// (SIGTERM, then a kill after 15 s) and waits for it; a failed test logs the process's last
// 40 lines. name says which process a message is about. A process that exits at start, or
// does not answer within 60 s, fails the test with its log; the returned base URL is then
// empty.
func StartProcess(tb testing.TB, name, bin, addr string, env []string) string {
	tb.Helper()
	cmd := exec.Command(bin)
	cmd.Env = env
	logs := &SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		tb.Errorf("start %s: %v", name, err)
		return ""
	}
	// exited is closed once the process has exited, with its error in waitErr: closed, not
	// sent, so that the start-up's check and the cleanup may both see it.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if tb.Failed() {
			lines := strings.Split(logs.String(), "\n")
			tb.Logf("%s, its last log lines:\n%s", name, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	url := "http://" + addr
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			tb.Errorf("%s exited at start: %v\n%s", name, waitErr, logs.String())
			return ""
		default:
		}
		if resp, err := http.Get(url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
	}
	tb.Errorf("%s did not answer /healthz within 60s:\n%s", name, logs.String())
	return ""
}
