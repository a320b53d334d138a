package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DialContext connects to addr ("host:port") the way a webhook attempt must: it resolves the
// host through the policy's resolver, drops every address the policy refuses, and dials the
// rest in turn; the socket's Control checks the address once more just before connect, so
// that nothing reaches a refused address whatever resolved it. A host whose every address is
// refused fails with a *Refusal naming the rule (the delivery log shows it).
func (p AddressPolicy) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return nil, fmt.Errorf("port %q is not in 1..65535", portText)
	}
	addrs, err := p.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: 10 * time.Second, Control: p.control}
	var first error
	for _, a := range addrs {
		if rule := p.CheckAddr(a, uint16(port)); rule != "" {
			if first == nil {
				first = &Refusal{Host: host, Addr: a, Rule: rule}
			}
			continue
		}
		conn, err := d.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		if first == nil || errors.As(first, new(*Refusal)) {
			first = err
		}
	}
	if first == nil {
		first = fmt.Errorf("%s resolves to no address", host)
	}
	return nil, first
}

// resolve returns host's addresses: host itself when it is an address in any spelling, else
// what the resolver says.
func (p AddressPolicy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	a, name, err := ParseHost(host)
	switch {
	case err != nil:
		return nil, &Refusal{Host: host, Rule: RuleInvalid}
	case a.IsValid():
		return []netip.Addr{a}, nil
	case name == "localhost" || strings.HasSuffix(name, ".localhost"):
		return []netip.Addr{netip.IPv6Loopback(), netip.MustParseAddr("127.0.0.1")}, nil
	}
	return p.resolver().LookupNetIP(ctx, "ip", name)
}

// control is the last check, on the address the socket is about to connect to.
func (p AddressPolicy) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("address policy: cannot read %q: %w", address, err)
	}
	if rule := p.CheckAddr(ap.Addr(), ap.Port()); rule != "" {
		return &Refusal{Host: ap.Addr().String(), Addr: ap.Addr(), Rule: rule}
	}
	return nil
}

// MaxResponseHeaderBytes bounds a receiver's response headers: an answer with more fails its
// attempt (status 0, error).
const MaxResponseHeaderBytes = 64 << 10

// Client returns the HTTP client of webhook attempts under the policy: every connection
// through DialContext, no proxy (a proxy would connect on oncepay's behalf, past the check),
// and no redirect followed — a 3xx is a failed attempt, since following one would send a
// signed body to a URL nobody registered, and an address the registration never saw.
func (p AddressPolicy) Client() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           p.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
			// A receiver's headers are bounded like its body: Go's default of 10 MiB let each
			// attempt in flight buffer that much (hostile pass of issue 27).
			MaxResponseHeaderBytes: MaxResponseHeaderBytes,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// UsePolicy makes s connect under p (the default is AddressPolicy{}: public addresses only).
func (s *Sender) UsePolicy(p AddressPolicy) *Sender {
	s.client = p.Client()
	return s
}
