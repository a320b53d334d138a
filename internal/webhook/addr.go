package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oncepay/oncepay/internal/platform/apperr"
)

// ErrURLRefused is a receiver URL whose host is, or resolves to, an address the address policy
// refuses (docs/contract.md, "Where a webhook may be sent"). Its detail names the rule.
var ErrURLRefused = apperr.New(http.StatusBadRequest, "url_refused", "the url's host is an address webhooks are never sent to")

// Rule names why an address is refused; it is the word a problem's detail and a delivery's
// error carry.
type Rule string

// The rules of the address policy, in the order they are checked. Metadata, zoned, own and
// unspecified addresses are refused even inside ONCEPAY_WEBHOOK_ALLOW_CIDRS; loopback is
// allowed by dev mode and an operator's CIDR; the others by an operator's CIDR.
const (
	RuleMetadata    Rule = "metadata"     // a cloud's instance metadata service
	RuleZoned       Rule = "zoned"        // an IPv6 address with a zone (%eth0)
	RuleOwn         Rule = "own_address"  // oncepay's own listener or its embedded services
	RuleUnspecified Rule = "unspecified"  // 0.0.0.0, ::
	RuleLoopback    Rule = "loopback"     // 127/8, ::1, localhost
	RulePrivate     Rule = "private"      // RFC 1918
	RuleCGNAT       Rule = "cgnat"        // 100.64/10 (RFC 6598)
	RuleLinkLocal   Rule = "link_local"   // 169.254/16, fe80::/10
	RuleUniqueLocal Rule = "unique_local" // fc00::/7
	RuleMulticast   Rule = "multicast"    // 224/4, ff00::/8
	RuleBroadcast   Rule = "broadcast"    // 255.255.255.255
	RuleReserved    Rule = "reserved"     // 0/8, 240/4, documentation and benchmarking ranges
	RuleInvalid     Rule = "invalid_host" // a host that is neither a name nor an address
)

// metadataAddrs are the instance metadata services of the clouds: AWS, GCP, Azure, OpenStack
// and Oracle (169.254.169.254), AWS ECS task metadata (169.254.170.2), AWS's IPv6 IMDS
// (fd00:ec2::254), Alibaba (100.100.100.200), Azure's wire server (168.63.129.16, a public
// address) and Oracle's 192.0.0.192; GCP's IPv6 metadata server (fd20:ce::254), Oracle's
// IPv6 IMDS (fd00:c1::a9fe:a9fe), Tencent Cloud's 169.254.0.23 and Scaleway's 169.254.42.42
// and fd00:42::42. Most fall in a refused range anyway; they are named so that no allow-list
// and no dev mode can reach them (an operator who allowed 169.254/16 or fc00::/7 for
// receivers reached the last five: hostile pass of issue 27).
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("169.254.170.2"),
	netip.MustParseAddr("169.254.169.253"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("fd00:ec2::23"),
	netip.MustParseAddr("100.100.100.200"),
	netip.MustParseAddr("168.63.129.16"),
	netip.MustParseAddr("192.0.0.192"),
	netip.MustParseAddr("fd20:ce::254"),
	netip.MustParseAddr("fd00:c1::a9fe:a9fe"),
	netip.MustParseAddr("169.254.0.23"),
	netip.MustParseAddr("169.254.42.42"),
	netip.MustParseAddr("fd00:42::42"),
}

// metadataNames are the host names of metadata services.
var metadataNames = []string{"metadata.google.internal", "metadata", "instance-data", "instance-data.ec2.internal"}

type ranged struct {
	rule     Rule
	prefixes []netip.Prefix
}

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// ranges are the refused ranges after the metadata addresses, zones and own addresses.
var ranges = []ranged{
	{RuleUnspecified, prefixes("0.0.0.0/32", "::/128")},
	{RuleLoopback, prefixes("127.0.0.0/8", "::1/128")},
	{RulePrivate, prefixes("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")},
	{RuleCGNAT, prefixes("100.64.0.0/10")},
	{RuleLinkLocal, prefixes("169.254.0.0/16", "fe80::/10")},
	{RuleUniqueLocal, prefixes("fc00::/7", "fec0::/10")},
	{RuleMulticast, prefixes("224.0.0.0/4", "ff00::/8")},
	{RuleBroadcast, prefixes("255.255.255.255/32")},
	// The last three are every IPv6 address outside global unicast 2000::/3 that no rule
	// above names: ::2, ::7f01, the local-use NAT64 prefix 64:ff9b:1::/48 (RFC 8215), whose
	// gateway reaches its own network's loopback, private and metadata addresses, 5f00::/8 —
	// no receiver has one (hostile pass of issue 27: each was accepted). 192.88.99/24 is the
	// deprecated 6to4 relay anycast (RFC 7526).
	{RuleReserved, prefixes("0.0.0.0/8", "240.0.0.0/4", "192.0.0.0/24", "192.0.2.0/24", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "192.88.99.0/24", "100::/64", "2001:db8::/32", "2001::/23",
		"::/3", "4000::/2", "8000::/1")},
}

// AddressPolicy says which addresses a webhook may connect to. It is checked twice: when a URL
// is registered or patched (every spelling of an address normalised, names resolved), and
// again by the sender's dialer on every connection, with the address actually dialled — a
// name that resolved to a public address at registration and resolves to 127.0.0.1 at send
// time is refused there (issue 27).
type AddressPolicy struct {
	// Dev allows http:// URLs and loopback addresses (ONCEPAY_WEBHOOK_DEV), never the
	// metadata addresses nor Own.
	Dev bool
	// Allow are an operator's CIDRs for receivers on a private network
	// (ONCEPAY_WEBHOOK_ALLOW_CIDRS): an address inside one passes every rule but metadata,
	// zoned, own_address and unspecified.
	Allow []netip.Prefix
	// Own are oncepay's own listener and its embedded services (the channel simulator, Redis,
	// Kafka), refused even in dev: a webhook aimed at the simulator's pay URL would pay an
	// order. An unspecified address stands for any address on its port.
	Own []netip.AddrPort
	// Later holds own addresses learnt after the policy was made and copied into the sender
	// and the handler — oncepay's listener on a free port (ONCEPAY_HTTP_ADDR=127.0.0.1:0) is
	// known only once it listens: every copy of the policy shares it. Nil holds none.
	Later *OwnLater
	// Resolver resolves names; nil is net.DefaultResolver. Tests put a seam here.
	Resolver Resolver
}

// Resolver resolves a host name to addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

func (p AddressPolicy) resolver() Resolver {
	if p.Resolver != nil {
		return p.Resolver
	}
	return net.DefaultResolver
}

// Canonical returns the address a refused-range check must look at: an IPv4-mapped
// (::ffff:a.b.c.d), IPv4-translated (::ffff:0:a.b.c.d, RFC 6145: a SIIT translator turns it
// into a.b.c.d; hostile pass of issue 27), IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::/96)
// or 6to4 (2002::/16) address is the IPv4 address it carries.
func Canonical(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if !a.Is6() || a.Zone() != "" {
		return a
	}
	b := a.As16()
	zero12 := [12]byte{}
	switch {
	case [12]byte(b[:12]) == zero12 && (b[12] != 0 || b[13] != 0): // ::a.b.c.d, not :: or ::1
		return netip.AddrFrom4([4]byte(b[12:]))
	case netip.MustParsePrefix("64:ff9b::/96").Contains(a), netip.MustParsePrefix("::ffff:0:0:0/96").Contains(a):
		return netip.AddrFrom4([4]byte(b[12:]))
	case b[0] == 0x20 && b[1] == 0x02:
		return netip.AddrFrom4([4]byte(b[2:6]))
	}
	return a
}

// CheckAddr returns the rule that refuses a connection to a at port (0: any port), or "".
func (p AddressPolicy) CheckAddr(a netip.Addr, port uint16) Rule {
	if a.Zone() != "" {
		return RuleZoned
	}
	c := Canonical(a)
	for _, m := range metadataAddrs {
		if c == m || a == m {
			return RuleMetadata
		}
	}
	for _, o := range append(p.Later.list(), p.Own...) {
		if o.Port() == port || port == 0 {
			if o.Addr() == c || (o.Addr().IsUnspecified() && (c.IsLoopback() || c.IsUnspecified())) {
				return RuleOwn
			}
		}
	}
	// 0.0.0.0 and :: are no receiver's address: a connection to one is a connection to this
	// machine's loopback, so that inside an operator's CIDR holding it (0.0.0.0/0) a webhook
	// reached oncepay's own listener on 127.0.0.1 (hostile pass of issue 27). Nothing allows it.
	if c.IsUnspecified() {
		return RuleUnspecified
	}
	// An operator's CIDR is judged by the canonical address too: an address that carries an
	// IPv4 address reaches that IPv4 address, so an IPv6-only list (::/0, 2000::/3,
	// 64:ff9b::/96) let ::ffff:127.0.0.1, 64:ff9b::a00:7 and 2002:a00:7:: reach loopback and
	// 10.0.0.7, which it never opened (hostile pass of issue 27).
	for _, pre := range p.Allow {
		if pre.Contains(c) {
			return ""
		}
	}
	for _, r := range ranges {
		for _, pre := range r.prefixes {
			if pre.Contains(c) {
				// Dev allows loopback: an address this machine answers on itself. A NAT64,
				// 6to4 or IPv4-compatible address that carries 127.x is judged loopback, and
				// stays refused in dev: it leaves the machine (behind a NAT64 gateway, it
				// reaches the gateway's own loopback). ::ffff:127.x is dialled as IPv4.
				if r.rule == RuleLoopback && p.Dev && a.Unmap().IsLoopback() {
					return ""
				}
				return r.rule
			}
		}
	}
	return ""
}

// OwnLater is AddressPolicy.Later: own addresses added while the policy is in use.
type OwnLater struct {
	mu    sync.RWMutex
	addrs []netip.AddrPort
}

// Add adds own addresses in the forms OwnAddrs reads ("host:port"; a wildcard host is every
// address of this machine on the port).
func (l *OwnLater) Add(ctx context.Context, addrs ...string) {
	own := OwnAddrs(ctx, nil, addrs...)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addrs = append(l.addrs, own...)
}

func (l *OwnLater) list() []netip.AddrPort {
	if l == nil {
		return nil
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	return slices.Clip(l.addrs)
}

// Refusal is a connection or a URL the policy refuses.
type Refusal struct {
	Host string
	Addr netip.Addr
	Rule Rule
}

func (r *Refusal) Error() string {
	if r.Addr.IsValid() && r.Host != r.Addr.String() {
		return fmt.Sprintf("%s resolves to %s, refused by the address policy: %s", r.Host, r.Addr, r.Rule)
	}
	if r.Addr.IsValid() {
		return fmt.Sprintf("%s is refused by the address policy: %s", r.Addr, r.Rule)
	}
	return fmt.Sprintf("%s is refused by the address policy: %s", r.Host, r.Rule)
}

// problem turns a refusal into the registration's answer.
func (r *Refusal) problem() error {
	return ErrURLRefused.Withf("url host %q is refused (rule %s): %s; see ONCEPAY_WEBHOOK_ALLOW_CIDRS for receivers on a private network",
		r.Host, r.Rule, r.Error())
}

// ParseHost reads a URL's host the way a browser or a C resolver would: an IPv4 address in any
// inet_aton spelling (127.1, 2130706433, 0177.0.0.1, 0x7f000001), an IPv6 address with or
// without a zone, or a name (lower case, no trailing dot). A host whose last label is a number
// but is no IPv4 address is invalid (WHATWG URL), so that no spelling slips past as a name.
func ParseHost(host string) (addr netip.Addr, name string, err error) {
	h := strings.ToLower(host)
	if strings.Contains(h, ":") { // IPv6, from inside brackets
		a, err := netip.ParseAddr(h)
		if err != nil {
			return netip.Addr{}, "", fmt.Errorf("%q is not an IPv6 address", host)
		}
		return a, "", nil
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" {
		return netip.Addr{}, "", errors.New("the host is empty")
	}
	labels := strings.Split(h, ".")
	if numeric(labels[len(labels)-1]) {
		a, ok := parseIPv4(labels)
		if !ok {
			return netip.Addr{}, "", fmt.Errorf("%q ends in a number but is not an IPv4 address", host)
		}
		return a, "", nil
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || strings.Trim(l, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return netip.Addr{}, "", fmt.Errorf("%q is not a host name", host)
		}
	}
	return netip.Addr{}, h, nil
}

// numeric reports whether a label is a number as inet_aton reads one: decimal, 0-octal or
// 0x-hex.
func numeric(l string) bool {
	if l == "" {
		return false
	}
	if strings.HasPrefix(l, "0x") {
		return strings.Trim(l[2:], "0123456789abcdef") == ""
	}
	return strings.Trim(l, "0123456789") == ""
}

// parseIPv4 is inet_aton: a.b.c.d, a.b.c (c 16 bits), a.b (b 24 bits) or a (32 bits), each
// part decimal, octal (leading 0) or hex (0x).
func parseIPv4(labels []string) (netip.Addr, bool) {
	if len(labels) > 4 {
		return netip.Addr{}, false
	}
	parts := make([]uint64, len(labels))
	for i, l := range labels {
		if !numeric(l) {
			return netip.Addr{}, false
		}
		base, digits := 10, l
		switch {
		case strings.HasPrefix(l, "0x"):
			base, digits = 16, l[2:]
			if digits == "" {
				digits = "0"
			}
		case len(l) > 1 && l[0] == '0':
			base, digits = 8, l[1:]
		}
		v, err := strconv.ParseUint(digits, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		parts[i] = v
	}
	last := parts[len(parts)-1]
	if last >= 1<<(8*(5-len(parts))) {
		return netip.Addr{}, false
	}
	v := last
	for i, p := range parts[:len(parts)-1] {
		if p > 255 {
			return netip.Addr{}, false
		}
		v |= p << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// resolveTimeout bounds the lookup of a name at registration.
const resolveTimeout = 3 * time.Second

// CheckURL returns the problem of a receiver URL, or nil: absolute http(s), https outside dev,
// no user info nor fragment, a valid port, and a host that neither is nor resolves to an
// address the policy refuses. A name that does not resolve now is accepted (a receiver may go
// live later): the dialer checks every connection anyway.
func (p AddressPolicy) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" || len(raw) > 2048 {
		return ErrInvalidURL.Withf("url must be an absolute http(s) URL of at most 2048 bytes, got %q", raw)
	}
	if u.User != nil || u.Fragment != "" {
		return ErrInvalidURL.Withf("url must carry no user info and no fragment")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && p.Dev:
	case u.Scheme == "http":
		return ErrInvalidURL.Withf("url must be https outside dev (ONCEPAY_WEBHOOK_DEV=true allows http for a local receiver)")
	default:
		return ErrInvalidURL.Withf("url scheme must be https, got %q", u.Scheme)
	}
	port, err := urlPort(u)
	if err != nil {
		return ErrInvalidURL.Withf("url port: %v", err)
	}
	addr, name, err := ParseHost(u.Hostname())
	if err != nil {
		return ErrURLRefused.Withf("url host is refused (rule %s): %v", RuleInvalid, err)
	}
	if addr.IsValid() {
		if rule := p.CheckAddr(addr, port); rule != "" {
			return (&Refusal{Host: u.Hostname(), Addr: addr, Rule: rule}).problem()
		}
		return nil
	}
	return p.checkName(ctx, name, port)
}

// checkName refuses the names of this machine and of metadata services, and a name that
// resolves to a refused address now.
func (p AddressPolicy) checkName(ctx context.Context, name string, port uint16) error {
	switch {
	case name == "localhost" || strings.HasSuffix(name, ".localhost"):
		if rule := p.CheckAddr(netip.MustParseAddr("127.0.0.1"), port); rule != "" {
			return (&Refusal{Host: name, Rule: rule}).problem()
		}
		return nil
	case strings.HasSuffix(name, ".internal") && strings.HasPrefix(name, "metadata"):
		return (&Refusal{Host: name, Rule: RuleMetadata}).problem()
	}
	for _, m := range metadataNames {
		if name == m {
			return (&Refusal{Host: name, Rule: RuleMetadata}).problem()
		}
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := p.resolver().LookupNetIP(ctx, "ip", name)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if rule := p.CheckAddr(a, port); rule != "" {
			return (&Refusal{Host: name, Addr: a, Rule: rule}).problem()
		}
	}
	return nil
}

// urlPort is the URL's port, its scheme's default when it has none; 0 and anything outside
// 1..65535 or not in decimal is an error.
func urlPort(u *url.URL) (uint16, error) {
	p := u.Port()
	if p == "" {
		if strings.HasSuffix(u.Host, ":") {
			return 0, errors.New("empty port")
		}
		if u.Scheme == "http" {
			return 80, nil
		}
		return 443, nil
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 || len(p) > 5 {
		return 0, fmt.Errorf("%q is not a port in 1..65535", p)
	}
	return uint16(n), nil
}

// OwnAddrs turns oncepay's own listen addresses ("host:port", "http(s)://host:port/…") into
// AddressPolicy.Own: an empty or wildcard host stands for every address of this machine on the
// port (the interfaces' addresses and the unspecified address, which CheckAddr reads as any
// loopback). A name is looked up once, now; one that does not resolve is left out.
func OwnAddrs(ctx context.Context, r Resolver, addrs ...string) []netip.AddrPort {
	if r == nil {
		r = net.DefaultResolver
	}
	var out []netip.AddrPort
	for _, raw := range addrs {
		hostport := raw
		if u, err := url.Parse(raw); err == nil && u.Host != "" && (u.Scheme == "http" || u.Scheme == "https") {
			hostport = u.Host
			if u.Port() == "" {
				hostport = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
			}
		}
		host, portText, err := net.SplitHostPort(hostport)
		port, perr := strconv.ParseUint(portText, 10, 16)
		if err != nil || perr != nil {
			continue
		}
		var ips []netip.Addr
		a, name, err := ParseHost(host)
		switch {
		case host == "" || (a.IsValid() && a.IsUnspecified()):
			ips = append(ips, netip.IPv4Unspecified())
			if ifaces, err := net.InterfaceAddrs(); err == nil {
				for _, ia := range ifaces {
					if p, err := netip.ParsePrefix(ia.String()); err == nil {
						ips = append(ips, p.Addr())
					}
				}
			}
		case err != nil:
		case a.IsValid():
			ips = append(ips, a)
		default:
			lctx, cancel := context.WithTimeout(ctx, resolveTimeout)
			found, _ := r.LookupNetIP(lctx, "ip", name)
			cancel()
			ips = append(ips, found...)
		}
		for _, ip := range ips {
			out = append(out, netip.AddrPortFrom(Canonical(ip.WithZone("")), uint16(port)))
		}
	}
	return out
}
