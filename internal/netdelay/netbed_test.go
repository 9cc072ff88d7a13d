package netdelay_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNetbed builds a two-host bed with scripts/netbed.sh (200 Mbit/s, 2 ms
// round trip), checks the bandwidth with iperf3 and the round trip with
// netdelay --ping, and removes it. It needs root (CAP_NET_ADMIN), ip, tc, ss,
// nft and iperf3, and is skipped without them.
func TestNetbed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces and tc")
	}
	for _, tool := range []string{"ip", "tc", "ss", "nft", "iperf3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	// Root in a container may still lack the rights to make namespaces.
	probe := fmt.Sprintf("dfnbprobe%d", os.Getpid()%100000)
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		t.Skipf("cannot make a network namespace here: %v: %s", err, out)
	}
	if out, err := exec.Command("ip", "netns", "del", probe).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del %s: %v: %s", probe, err, out)
	}
	script, err := filepath.Abs("../../scripts/netbed.sh")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "netdelay")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/netdelay").CombinedOutput(); err != nil {
		t.Fatalf("building netdelay: %v\n%s", err, out)
	}
	prefix := fmt.Sprintf("dfnbtest%d", os.Getpid()%100000)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(script, args...)
		cmd.Env = append(os.Environ(), "NETBED_PREFIX="+prefix, "NETDELAY="+bin, "DISTFLOW=/nonexistent")
		out, err := cmd.Output()
		if err != nil {
			msg := ""
			if ee, ok := err.(*exec.ExitError); ok {
				msg = string(ee.Stderr)
			}
			t.Fatalf("netbed.sh %s: %v\n%s%s", strings.Join(args, " "), err, out, msg)
		}
		return strings.TrimSpace(string(out))
	}
	number := func(s string) float64 {
		t.Helper()
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("not a number: %q", s)
		}
		return v
	}
	t.Cleanup(func() {
		run("down")
		out, _ := exec.Command("ip", "netns", "list").Output()
		if strings.Contains(string(out), prefix+"-") {
			t.Errorf("namespaces left after down:\n%s", out)
		}
	})
	run("up", "2", "--rate", "200mbit", "--rtt", "2ms")
	mbps := number(run("iperf", "0", "1", "2"))
	rtt := number(run("rtt", "1", "0"))
	t.Logf("200mbit, 2ms bed: iperf3 %.0f Mbit/s, round trip %.0f us", mbps, rtt)
	if mbps < 120 || mbps > 210 {
		t.Errorf("iperf3 through the bed: %.0f Mbit/s, want about 200 (tbf)", mbps)
	}
	if rtt < 2000 || rtt > 3500 {
		t.Errorf("round trip through the bed: %.0f us, want about 2000 (netdelay)", rtt)
	}
}
