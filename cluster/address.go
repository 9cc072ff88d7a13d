package cluster

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// DefaultPort is the port TensorFlow's examples and tools give a task when
// none is written; distflow's tools (distflow status) use it for a bare host.
const DefaultPort = 2222

// CheckAddress reports whether addr is a task address a cluster may list:
// host:port, with a host name, an IPv4 address or a bracketed IPv6 address,
// and a decimal port in 1-65535. Host names are not resolved. The error
// wraps ErrBadAddress and names addr.
func CheckAddress(addr string) error {
	_, err := ParseAddress(addr, 0)
	return err
}

// ParseAddress returns the task address s as host:port, adding defaultPort
// when s is a host alone: "h", "[::1]" (an IPv6 address needs its brackets
// either way). A defaultPort of 0 means a port is required. The result
// passes CheckAddress; the error wraps ErrBadAddress and names s.
func ParseAddress(s string, defaultPort int) (string, error) {
	addr := s
	if defaultPort != 0 && s != "" {
		switch bracketed := strings.HasPrefix(s, "["); {
		case bracketed && strings.HasSuffix(s, "]"), !bracketed && !strings.Contains(s, ":"):
			addr = net.JoinHostPort(strings.Trim(s, "[]"), strconv.Itoa(defaultPort))
		case !bracketed && strings.Count(s, ":") > 1:
			if _, err := netip.ParseAddr(s); err == nil {
				return "", fmt.Errorf("cluster: %w %q: an IPv6 address needs brackets: [%s] or [%s]:%d", ErrBadAddress, s, s, s, defaultPort)
			}
		}
	}
	if _, err := endpoints(addr); err != nil {
		return "", fmt.Errorf("cluster: %w %q: %v", ErrBadAddress, s, err)
	}
	return addr, nil
}

// endpoints validates the address a and returns the endpoints it reaches,
// in a normalised form for duplicate detection: the host lower-cased (or
// the IP address in canonical form, an IPv4-mapped IPv6 address as IPv4)
// and the port in decimal without leading zeros. localhost reaches two
// endpoints, 127.0.0.1:P and [::1]:P, since it resolves to either; no other
// name is resolved, so two names of one machine are not caught.
func endpoints(a string) ([]string, error) {
	if a == "" {
		return nil, errors.New("the address is empty")
	}
	if strings.ContainsAny(a, " \t\r\n") {
		return nil, errors.New("the address contains whitespace")
	}
	if strings.Contains(a, "://") {
		return nil, errors.New("want host:port without a scheme")
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		if !strings.Contains(a, ":") || strings.HasPrefix(a, "[") && strings.HasSuffix(a, "]") {
			return nil, errors.New("missing port (want host:port)")
		}
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return nil, errors.New(ae.Err)
		}
		return nil, err
	}
	if host == "" {
		return nil, errors.New("empty host (want host:port)")
	}
	p, err := parsePort(port)
	if err != nil {
		return nil, err
	}
	ps := strconv.Itoa(p)
	if strings.Contains(host, ":") {
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return nil, fmt.Errorf("bad IPv6 host %q", host)
		}
		return []string{net.JoinHostPort(ip.Unmap().String(), ps)}, nil
	}
	for _, r := range host {
		if !(r == '.' || r == '-' || r == '_' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') {
			return nil, fmt.Errorf("host %q has the character %q", host, r)
		}
	}
	host = strings.ToLower(host)
	if isLocalhost(host) {
		return []string{net.JoinHostPort("127.0.0.1", ps), net.JoinHostPort("::1", ps)}, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.String()
	}
	return []string{net.JoinHostPort(host, ps)}, nil
}

// parsePort accepts decimal digits only (no sign), leading zeros allowed,
// with a value in 1-65535.
func parsePort(port string) (int, error) {
	if port == "" {
		return 0, errors.New("missing port (want host:port)")
	}
	for _, r := range port {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("port %q is not a number", port)
		}
	}
	digits := strings.TrimLeft(port, "0")
	if len(digits) > 5 {
		return 0, fmt.Errorf("port %s is out of range 1-65535", port)
	}
	p, _ := strconv.Atoi(digits) // "" (all zeros) is 0
	if p < 1 || p > 65535 {
		return 0, fmt.Errorf("port %d is out of range 1-65535", p)
	}
	return p, nil
}

func isLocalhost(lowerHost string) bool { return lowerHost == "localhost" || lowerHost == "localhost." }

// sameAddress describes the address two tasks share, for the duplicate
// error: the address itself when both wrote it alike, else the endpoint
// and both spellings.
func sameAddress(a, b, endpoint string) string {
	if a == b {
		return a
	}
	s := fmt.Sprintf("%s (written %q and %q", endpoint, a, b)
	for _, x := range []string{a, b} {
		if h, _, err := net.SplitHostPort(x); err == nil && isLocalhost(strings.ToLower(h)) {
			s += "; localhost is both 127.0.0.1 and ::1"
			break
		}
	}
	return s + ")"
}
