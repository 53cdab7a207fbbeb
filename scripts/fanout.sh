#!/usr/bin/env bash
# fanout.sh - fan-out latency, Ferry beside Mosquitto: one QoS 1 publisher, FO_SUBS QoS 1 subscribers.
#
#   scripts/fanout.sh
#
# Starts one bridge on Kafka (FERRY_TEST_KAFKA, else scripts/kafka.sh's, started and stopped when it
# was not running), a second bridge on the same Kafka, and Mosquitto (the Debian package, in memory),
# then runs the same probe against each, FO_ROUNDS times, alternating:
#   mosquitto    probe roundtrip --local --mqtt M --subscribers N
#   ferry        probe roundtrip --local --mqtt A --subscribers N        (publisher and subscribers on A)
#   ferry-across probe roundtrip --mqtt A --reply-mqtt B --subscribers N  (subscribers on B: through Kafka)
# Open loop at FO_RATE publishes/s (25: 25,000 deliveries/s to 1,000 subscribers), QoS 1, 12 B,
# FO_COUNT measured publishes (1000) after FO_WARMUP (250: 10 s, longer than the second instance
# takes to find the run's new topic, up to its 5 s topic listing plus a 0.5 s demand round: a
# shorter warm-up times that start, not the fan-out); latency from the intended send time to
# each subscriber's receipt, p50 / p99 / max over all deliveries. Prints each run's summary with the
# load average before it. Run it on a quiet machine: Kafka, the bridges, Mosquitto and the probe (with
# its 1,000 connections) share its cores. CSVs and logs go to FO_OUT (default
# bench-results/fanout-<timestamp>, git-ignored).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SUBS=${FO_SUBS:-1000}
RATE=${FO_RATE:-25}
COUNT=${FO_COUNT:-1000}
WARMUP=${FO_WARMUP:-250}
ROUNDS=${FO_ROUNDS:-2}
OUT=${FO_OUT:-bench-results/fanout-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
MOSQUITTO="$(command -v mosquitto || echo /usr/sbin/mosquitto)"
[[ -x "$MOSQUITTO" ]] || { echo "fanout.sh: mosquitto not installed (apt-get install -y mosquitto)" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
(($(ulimit -n) >= 4 * SUBS + 256)) || { echo "fanout.sh: ulimit -n $(ulimit -n) is too low for $SUBS subscribers" >&2; exit 1; }
# shellcheck source=lib/bridges.sh
. "$ROOT/scripts/lib/bridges.sh"
wait_port() { # wait_port HOST:PORT
	for _ in $(seq 1 150); do
		(exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0
		sleep 0.1
	done
	echo "fanout.sh: nothing listens on $1" >&2
	exit 1
}
tag=$(date +%s%N | tail -c 9)
declare -A addr=()
for name in a b; do
	addr[$name]=127.0.0.1:$(free_port)
	FERRY_STATE_SESSIONS_TOPIC=_ferry_sessions_fo$tag FERRY_STATE_RETAINED_TOPIC=_ferry_retained_fo$tag \
		"$bin/bridge" --kafka "$FERRY_TEST_KAFKA" --mqtt-listen "${addr[$name]}" --http-listen "" \
		--instance-id "fo-$name-$tag" >"$OUT/bridge-$name.log" 2>&1 &
	pids+=($!)
done
addr[m]=127.0.0.1:$(free_port)
cat >"$OUT/mosquitto.conf" <<EOF
listener ${addr[m]#*:} 127.0.0.1
allow_anonymous true
persistence false
max_inflight_messages 0
max_queued_messages 10000
EOF
"$MOSQUITTO" -c "$OUT/mosquitto.conf" >"$OUT/mosquitto.log" 2>&1 &
pids+=($!)
for name in a b m; do wait_port "${addr[$name]}"; done
run() { # run NAME ROUND URL ARGS...
	local name=$1 round=$2 url=$3
	shift 3
	printf '== %s, round %s (load average %s)\n' "$name" "$round" "$(cut -d' ' -f1-3 /proc/loadavg)"
	"$bin/probe" roundtrip --mqtt "$url" "$@" --topic "/fo/$tag/$name/$round" --qos 1 --payload-size 12 \
		--subscribers "$SUBS" --ramp 500 --rate "$RATE" --count "$COUNT" --warmup "$WARMUP" \
		--csv "$OUT/$name-$round.csv" 2>&1 | tee "$OUT/$name-$round.txt"
}
for round in $(seq 1 "$ROUNDS"); do
	run mosquitto "$round" "tcp://${addr[m]}" --local
	run ferry "$round" "tcp://${addr[a]}" --local
	run ferry-across "$round" "tcp://${addr[a]}" --reply-mqtt "tcp://${addr[b]}"
done
echo "outputs: $OUT"
