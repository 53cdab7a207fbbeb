#!/usr/bin/env bash
# roundtrip.sh - MQTT -> Kafka -> MQTT latency, on one instance and across two (issue 54).
#
#   scripts/roundtrip.sh
#
# Starts two bridges (A and B, default configuration: reading on demand) on one Kafka (FERRY_TEST_KAFKA,
# else scripts/kafka.sh's, started and stopped when it was not running), then runs
#   across  probe roundtrip --mqtt A --reply-mqtt B --kafka K   (publisher on A, subscriber on B)
# with its per-hop split (publish -> Kafka append -> delivery on B), and
#   same     probe roundtrip --local --mqtt A --kafka K                  (publisher and subscriber on A)
# whose subscriber gets the forward path's local delivery once Kafka has acknowledged the record
# (not a Kafka read); its split shows the append hop and the delivery after it.
# Open loop at RT_RATE msg/s (1000), QoS 1, 12 B, RT_COUNT measured messages (20000) after RT_WARMUP (6000: 6 s,
# longer than B takes to find the run's new topic: its 5 s topic listing and a 0.5 s demand round),
# and prints each run's summary (p50 / p99 / max) with the load average before it. Run it on a quiet
# machine: Kafka, both bridges and the probe share its cores. CSVs and logs go to RT_OUT (default
# bench-results/roundtrip-<timestamp>, git-ignored).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RATE=${RT_RATE:-1000}
COUNT=${RT_COUNT:-20000}
WARMUP=${RT_WARMUP:-6000}
OUT=${RT_OUT:-bench-results/roundtrip-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
# shellcheck source=lib/bridges.sh
. "$ROOT/scripts/lib/bridges.sh"
tag=$(date +%s%N | tail -c 9)
declare -A addr=()
for name in a b; do
	port=$(free_port)
	addr[$name]=127.0.0.1:$port
	FERRY_STATE_SESSIONS_TOPIC=_ferry_sessions_rt$tag FERRY_STATE_RETAINED_TOPIC=_ferry_retained_rt$tag \
		"$bin/bridge" --kafka "$FERRY_TEST_KAFKA" --mqtt-listen "${addr[$name]}" --http-listen "" \
		--instance-id "rt-$name-$tag" >"$OUT/bridge-$name.log" 2>&1 &
	pids+=($!)
done
for name in a b; do
	for _ in $(seq 1 100); do
		(exec 3<>"/dev/tcp/${addr[$name]%:*}/${addr[$name]#*:}") 2>/dev/null && break
		sleep 0.1
	done
done
run() { # run NAME REPLY_ARGS...
	local name=$1
	shift
	printf '== %s (load average %s)\n' "$name" "$(cut -d' ' -f1-3 /proc/loadavg)"
	"$bin/probe" roundtrip --mqtt "tcp://${addr[a]}" "$@" --kafka "$FERRY_TEST_KAFKA" \
		--topic "/rt/$tag/$name" --qos 1 --payload-size 12 --rate "$RATE" --count "$COUNT" --warmup "$WARMUP" \
		--csv "$OUT/$name.csv" 2>&1 | tee "$OUT/$name.txt"
}
run across --reply-mqtt "tcp://${addr[b]}"
run same --local
echo "outputs: $OUT"
