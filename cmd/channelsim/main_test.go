package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseOptionsDefaultsToTheEnvironment(t *testing.T) {
	env := map[string]string{
		"ONCEPAY_EMBEDDED_CHANNEL_ADDR": ":19999",
		"ONCEPAY_CHANNEL_SECRET":        "s3cret",
		"ONCEPAY_CHANNEL_SIM_SCHEDULE":  "1s,2s",
		"ONCEPAY_DATA_DIR":              "/tmp/d",
	}
	opts, err := parseOptions(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if opts.addr != ":19999" || opts.secret != "s3cret" || len(opts.schedule) != 2 ||
		opts.stateFile != filepath.Join("/tmp/d", "channelsim.json") || opts.publicURL != "http://127.0.0.1:19999" {
		t.Errorf("options = %+v", opts)
	}
	opts, err = parseOptions([]string{"-addr", "localhost:1234"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if opts.addr != "localhost:1234" || opts.secret != defaultSecret || opts.schedule != nil || opts.publicURL != "http://localhost:1234" {
		t.Errorf("default options = %+v", opts)
	}
	if _, err := parseOptions([]string{"-schedule", "soon"}, func(string) string { return "" }, io.Discard); err == nil {
		t.Error("a bad schedule was accepted")
	}
}

func TestRunServesUntilCancelledAndSavesState(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-data-dir", dir}, func(string) string { return "" }, io.Discard)
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not stop")
	}
	if _, err := os.Stat(filepath.Join(dir, "channelsim.json")); err != nil {
		t.Errorf("state file: %v", err)
	}
}

// TestCheckProbesARunningSimulator: -check exits 0 against a simulator that serves on -addr,
// and with an error where nothing listens, which is what a container healthcheck needs.
func TestCheckProbesARunningSimulator(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	env := func(string) string { return "" }
	if err := run(context.Background(), []string{"-addr", addr, "-check"}, env, io.Discard); err == nil {
		t.Fatal("-check succeeded where nothing listens")
	}
	ctx, cancel := context.WithCancel(context.Background())
	dir, served := t.TempDir(), make(chan struct{})
	go func() {
		defer close(served)
		_ = run(ctx, []string{"-addr", addr, "-data-dir", dir}, env, io.Discard)
	}()
	defer func() { cancel(); <-served }() // the state file is saved before the dir goes
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := run(context.Background(), []string{"-addr", addr, "-check"}, env, io.Discard)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("-check against a running simulator: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
