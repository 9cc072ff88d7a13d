#!/usr/bin/env bash
# netbed.sh: a shaped-network test bed on one machine (root only).
#
# Each "host" is a network namespace PREFIX-I with one interface, eth0
# (10.77.0.(10+I)/24), a veth pair to a bridge in the namespace PREFIX-hub.
# Both ends of every pair are shaped with tc tbf to RATE, so each host has a
# full-duplex link of RATE to a non-blocking switch. The kernel here has no
# netem, so latency is added in user space: an nftables rule in each host
# redirects every TCP connection it makes to another host (any program, any
# port) to a transparent netdelay proxy (cmd/netdelay --transparent) in the
# same namespace, which goes on to the address dialled and delays each byte
# by RTT/2 in each direction. Addresses exist only inside the namespaces
# this script makes; nothing touches the machine's own network namespace.
# It needs iproute2 (ip, tc, ss) and, for a round trip above 0, nft.
#
#   scripts/netbed.sh up 4 --rate 1gbit --rtt 0.5ms   # 4 hosts
#   scripts/netbed.sh iperf 0 1                        # Mbit/s from host 0 to host 1
#   scripts/netbed.sh rtt 0 1                          # round trip in us, host 0 to host 1
#   scripts/netbed.sh train --ps 1 --workers 2 -- --model mlp --steps 300 --sync --json
#   scripts/netbed.sh exec 0 ip addr
#   scripts/netbed.sh down
#
# train runs one task per host (chief or worker 0 on host 0, then the other
# workers, then the ps tasks), each `distflow train` with its TF_CONFIG,
# certificates made for the run, and the arguments after --; it prints the
# chief's stdout and exits with the chief's status. Its tasks' stderr goes to
# $STATE/train-*.log, how each ended to $STATE/train-status.
#
# Environment: NETBED_PREFIX (namespace prefix, default dfnb: two beds with
# other prefixes can coexist), DISTFLOW and NETDELAY (the binaries; default:
# built from this tree into the state directory), NETBED_TIMEOUT (seconds a
# train run may take, default 600).
set -euo pipefail

PREFIX=${NETBED_PREFIX:-dfnb}
STATE=/run/netbed-$PREFIX
SUBNET=10.77.0
PORT=2222
# Each host's transparent delay proxy listens on 127.0.0.1:DELAYPORT; its
# own connections carry firewall mark MARK, which the redirect leaves alone.
DELAYPORT=7777
MARK=1
ROOT=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "netbed: $*" >&2; exit 1; }
ns() { echo "$PREFIX-$1"; }
addr() { echo "$SUBNET.$((10 + $1))"; }
hosts() { cat "$STATE/hosts" 2>/dev/null || die "no bed: run netbed.sh up N first"; }

# rate_bps turns a tc rate (100mbit, 1gbit, 2.5gbit, 500kbit) into bit/s.
rate_bps() {
	awk -v r="$1" 'BEGIN {
		n = r + 0; u = tolower(substr(r, length(n "") + 1))
		m = (u == "gbit") ? 1e9 : (u == "mbit") ? 1e6 : (u == "kbit") ? 1e3 : (u == "bit") ? 1 : -1
		if (n <= 0 || m < 0) exit 1
		printf "%d\n", n * m }' || die "--rate $1: want e.g. 100mbit, 1gbit, 10gbit"
}

# half_us is half of a duration (0.5ms, 200us, 1ms) in microseconds.
half_us() {
	awk -v d="$1" 'BEGIN {
		n = d + 0; u = tolower(substr(d, length(n "") + 1))
		m = (u == "ms") ? 1000 : (u == "us") ? 1 : (u == "s") ? 1e6 : -1
		if (n < 0 || m < 0) exit 1
		printf "%d\n", n * m / 2 }' || die "--rtt $1: want e.g. 0.5ms or 200us"
}

need_root() {
	[ "$(id -u)" = 0 ] || die "needs root (CAP_NET_ADMIN) for network namespaces and tc"
	command -v ip >/dev/null && command -v tc >/dev/null || die "needs ip and tc (iproute2)"
}

binaries() { # [distflow]: build what is not given
	mkdir -p "$STATE"
	if [ "${1:-}" = distflow ] && [ -z "${DISTFLOW:-}" ]; then
		DISTFLOW=$STATE/distflow
		(cd "$ROOT" && go build -o "$DISTFLOW" ./cmd/distflow)
	fi
	if [ -z "${NETDELAY:-}" ]; then
		NETDELAY=$STATE/netdelay
		(cd "$ROOT" && go build -o "$NETDELAY" ./cmd/netdelay)
	fi
}

cmd_up() {
	local n=${1:-}; shift || true
	local rate=1gbit rtt=0.5ms
	while [ $# -gt 0 ]; do
		case $1 in
		--rate) rate=$2; shift 2 ;;
		--rtt) rtt=$2; shift 2 ;;
		*) die "up: unknown argument $1" ;;
		esac
	done
	[[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 200 ] || die "up N: want 2 to 200 hosts"
	need_root
	[ -e "$STATE/hosts" ] && die "a bed $PREFIX is up: netbed.sh down first"
	local bps burst half
	bps=$(rate_bps "$rate")
	half=$(half_us "$rtt")
	if [ "$half" -gt 0 ]; then
		command -v nft >/dev/null || die "needs nft (Debian's nftables) to add the latency"
		binaries
	fi
	# A burst of 2 ms at the rate (at least 32 KiB): tbf needs more than a
	# timer tick's worth to reach the rate.
	burst=$((bps / 4000)); [ "$burst" -ge 32768 ] || burst=32768
	mkdir -p "$STATE"
	echo "$rate" >"$STATE/rate"; echo "$rtt" >"$STATE/rtt"
	ip netns add "$(ns hub)"
	ip -n "$(ns hub)" link set lo up
	ip -n "$(ns hub)" link add br0 type bridge
	ip -n "$(ns hub)" link set br0 up
	for ((i = 0; i < n; i++)); do
		ip netns add "$(ns "$i")"
		ip -n "$(ns "$i")" link set lo up
		ip link add eth0 netns "$(ns "$i")" type veth peer name "v$i" netns "$(ns hub)"
		ip -n "$(ns "$i")" addr add "$(addr "$i")/24" dev eth0
		ip -n "$(ns "$i")" link set eth0 up
		ip -n "$(ns hub)" link set "v$i" master br0 up
		tc -n "$(ns "$i")" qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 10ms
		tc -n "$(ns hub)" qdisc add dev "v$i" root tbf rate "$rate" burst "$burst" latency 10ms
		echo $((i + 1)) >"$STATE/hosts"
		[ "$half" -gt 0 ] && delay_host "$i" "$half"
	done
	echo "netbed: $n hosts ($(ns 0)..$(ns $((n - 1))), $SUBNET.10-$((9 + n))) at $rate, +$rtt round trip through netdelay"
}

# delay_host HOST HALF_US: every TCP connection HOST makes to the bed's
# subnet goes through a transparent netdelay proxy in its namespace (which
# lives as long as the namespace: down kills it).
delay_host() {
	local h=$1 half=$2
	ip netns exec "$(ns "$h")" nft -f - <<-EOF
		table ip netbed {
			chain out {
				type nat hook output priority -100; policy accept;
				ip daddr $SUBNET.0/24 meta l4proto tcp meta mark != $MARK redirect to :$DELAYPORT
			}
		}
	EOF
	ip netns exec "$(ns "$h")" "$NETDELAY" --listen "127.0.0.1:$DELAYPORT" --transparent --mark "$MARK" --delay "${half}us" \
		>/dev/null 2>>"$STATE/netdelay.log" &
	wait_port "$h" "$DELAYPORT"
}

cmd_down() {
	local n
	for n in $(ip netns list | awk '{print $1}' | grep -E "^$PREFIX-([0-9]+|hub)\$" || true); do
		# Only processes inside the bed's namespaces: ours.
		for p in $(ip netns pids "$n" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
		ip netns del "$n"
	done
	rm -rf "$STATE"
}

cmd_exec() {
	local i=$1; shift
	[ "$i" -lt "$(hosts)" ] || die "exec $i: the bed has $(hosts) hosts"
	exec ip netns exec "$(ns "$i")" "$@"
}

wait_port() { # HOST PORT: until something listens there (without connecting,
	# which a one-shot server such as iperf3 -1 would take for its client)
	local k
	for ((k = 0; k < 100; k++)); do
		[ -n "$(ip netns exec "$(ns "$1")" ss -Hltn "sport = :$2")" ] && return 0
		sleep 0.05
	done
	die "nothing listens on port $2 of host $1"
}

cmd_iperf() {
	local from=$1 to=$2 secs=${3:-3}
	command -v iperf3 >/dev/null || die "needs iperf3"
	ip netns exec "$(ns "$to")" iperf3 -s -1 -B "$(addr "$to")" -p 5201 >/dev/null &
	local srv=$!
	wait_port "$to" 5201
	ip netns exec "$(ns "$from")" iperf3 -c "$(addr "$to")" -p 5201 -t "$secs" -J |
		awk -F: '/"sum_received"/ {r = 1} r && /"bits_per_second"/ {gsub(/[ ,]/, "", $2); printf "%.0f\n", $2 / 1e6; exit}'
	wait "$srv" 2>/dev/null || true
}

cmd_rtt() {
	local from=$1 to=$2
	binaries
	ip netns exec "$(ns "$to")" "$NETDELAY" --echo "$(addr "$to"):7007" >/dev/null &
	local echo=$!
	wait_port "$to" 7007
	ip netns exec "$(ns "$from")" "$NETDELAY" --ping "$(addr "$to"):7007" --count 200
	kill "$echo" 2>/dev/null || true
	wait 2>/dev/null || true
}

cmd_train() {
	local ps=0 workers=0 chief=0
	while [ $# -gt 0 ]; do
		case $1 in
		--ps) ps=$2; shift 2 ;;
		--workers) workers=$2; shift 2 ;;
		--chief) chief=1; shift ;;
		--) shift; break ;;
		*) die "train: unknown argument $1 (the train flags go after --)" ;;
		esac
	done
	local n=$((chief + workers + ps))
	[ "$workers" -ge 1 ] || die "train: want --workers 1 or more"
	[ "$n" -le "$(hosts)" ] || die "train: $n tasks, the bed has $(hosts) hosts"
	binaries distflow
	# Hosts: chief, workers, ps, in that order.
	local -a job idx
	local h=0 k
	for ((k = 0; k < chief; k++)); do job[h]=chief; idx[h]=$k; h=$((h + 1)); done
	for ((k = 0; k < workers; k++)); do job[h]=worker; idx[h]=$k; h=$((h + 1)); done
	for ((k = 0; k < ps; k++)); do job[h]=ps; idx[h]=$k; h=$((h + 1)); done
	local list_chief="" list_worker="" list_ps="" a
	for ((h = 0; h < n; h++)); do
		a="$(addr "$h"):$PORT"
		case ${job[h]} in
		chief) list_chief+="${list_chief:+,}$a" ;;
		worker) list_worker+="${list_worker:+,}$a" ;;
		ps) list_ps+="${list_ps:+,}$a" ;;
		esac
	done
	local certs=$STATE/certs
	rm -rf "$certs"
	"$DISTFLOW" certs create --dir "$certs" --no-client \
		${list_chief:+--chief_hosts=$list_chief} --worker_hosts="$list_worker" ${list_ps:+--ps_hosts=$list_ps} >/dev/null
	local cluster="" j
	for j in chief worker ps; do
		local v="list_$j"
		[ -n "${!v}" ] || continue
		cluster+="${cluster:+,}\"$j\": [\"$(echo "${!v}" | sed 's/,/", "/g')\"]"
	done
	local -a pids
	for ((h = 0; h < n; h++)); do
		TF_CONFIG="{\"cluster\": {$cluster}, \"task\": {\"type\": \"${job[h]}\", \"index\": ${idx[h]}}}" \
			ip netns exec "$(ns "$h")" "$DISTFLOW" train --certs-dir "$certs" "$@" \
			>"$STATE/train-$h.out" 2>"$STATE/train-$h.log" &
		pids[h]=$!
	done
	local status=0 deadline=$((SECONDS + ${NETBED_TIMEOUT:-600}))
	# Host 0 runs the chief (or worker 0, the chief without a chief job).
	while kill -0 "${pids[0]}" 2>/dev/null; do
		[ $SECONDS -lt $deadline ] || { echo "netbed: train timed out" >&2; kill "${pids[@]}" 2>/dev/null || true; break; }
		sleep 0.2
	done
	wait "${pids[0]}" || status=$?
	# The others end on their own (workers at the last step, ps tasks when
	# the chief stops them); give them a little time, then stop them.
	for ((k = 0; k < 50; k++)); do
		local alive=0
		for ((h = 1; h < n; h++)); do kill -0 "${pids[h]}" 2>/dev/null && alive=1; done
		[ $alive = 1 ] || break
		sleep 0.1
	done
	# $STATE/train-status: how each task ended ("worker 1 exit 0", "ps 0
	# stopped" when it had to be killed).
	echo "${job[0]} ${idx[0]} exit $status" >"$STATE/train-status"
	for ((h = 1; h < n; h++)); do
		local st
		if kill -0 "${pids[h]}" 2>/dev/null; then
			kill "${pids[h]}" 2>/dev/null || true
			wait "${pids[h]}" 2>/dev/null || true
			st=stopped
		else
			st=0; wait "${pids[h]}" 2>/dev/null || st=$?
			st="exit $st"
		fi
		echo "${job[h]} ${idx[h]} $st" >>"$STATE/train-status"
	done
	cat "$STATE/train-0.out"
	[ $status = 0 ] || { echo "netbed: the chief failed ($status); see $STATE/train-*.log" >&2; tail -5 "$STATE/train-0.log" >&2; }
	return $status
}

case ${1:-} in
up) shift; cmd_up "$@" ;;
down) need_root; cmd_down ;;
exec) shift; need_root; cmd_exec "$@" ;;
iperf) shift; need_root; hosts >/dev/null; cmd_iperf "$@" ;;
rtt) shift; need_root; hosts >/dev/null; cmd_rtt "$@" ;;
train) shift; need_root; hosts >/dev/null; cmd_train "$@" ;;
addr) addr "$2" ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
