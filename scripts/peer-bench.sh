#!/usr/bin/env bash
# peer-bench.sh - Ferry against another MQTT -> Kafka bridge (the peer) in one run on one machine:
# the forward path's PUBACK rate and the CPU each message costs the bridge and Kafka.
#
#   PEER_BENCH_DIR=DIR scripts/peer-bench.sh
#
# DIR holds the peer and a `peer.sh build|start|stop` that builds it, starts it in the background
# with its MQTT listener on 127.0.0.1:24883 and its Kafka on 127.0.0.1:9092 (printing its pid as
# the last line), and stops it; its MQTT topics peer/... go to one Kafka topic (the Strimzi MQTT
# bridge's peer directory is such a DIR; its topic is peer_strimzi). The peer is built when
# `peer.sh start` says it is not.
#
# Ferry runs with its default configuration (acks=all; the peer's may differ: say which it uses)
# on 127.0.0.1:21883, HTTP 127.0.0.1:21884, the same single-node Kafka on 127.0.0.1:9092
# (scripts/kafka.sh up, started and stopped here when it does not run). One outside load generator
# (the probe's raw MQTT engine, --ack-only: the PUBACK rate) drives both: QoS 1, PEER_CLIENTS
# connections x PEER_INFLIGHT publishes in flight, one MQTT topic each (one Kafka partition each).
# After one untimed warm-up run per system and payload (a quarter of the count: JIT, topics), rounds
# alternate the systems (peer first in odd rounds, Ferry first in even ones), for each payload size.
# Per run: msg/s, PUBACK p50/p99, CPU per message of the bridge process and of Kafka (user+system
# from /proc over the whole run, the probe's own warm-up included), the load average before it.
# Prints the medians per system and payload, and Ferry/peer. Run it with nothing else on the
# machine; the probe says when it was the limit (logged).
#
# Environment: PEER_ROUNDS (3), PEER_PAYLOADS ("12 1024"), PEER_COUNT (messages per 12 B run,
# 2000000; a 1 KiB run sends a quarter), PEER_CLIENTS (4), PEER_INFLIGHT (256), PEER_OUT (output
# dir, default bench-results/peer-<timestamp>), PEER_PROFILE (set: a 5 s CPU profile of Ferry in
# each of its runs, cpu-ROUND-PAYLOAD.pprof), FERRY_CONFIG (a config file for Ferry instead of its
# defaults; its mqtt.listen and http.listen are overridden).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=lib/measure.sh
source "$ROOT/scripts/lib/measure.sh"
[ -n "${PEER_BENCH_DIR:-}" ] && [ -x "$PEER_BENCH_DIR/peer.sh" ] || {
	sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//' >&2
	echo "peer-bench.sh: PEER_BENCH_DIR must name a directory with an executable peer.sh" >&2
	exit 2
}
: "${PEER_ROUNDS:=3}" "${PEER_PAYLOADS:=12 1024}" "${PEER_COUNT:=2000000}" "${PEER_CLIENTS:=4}" "${PEER_INFLIGHT:=256}"
OUT="${PEER_OUT:-$ROOT/bench-results/peer-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT/logs"
OUT="$(cd "$OUT" && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/ferry-peer.XXXXXX")"
RUN="pb$(date +%s)"
KAFKA=127.0.0.1:9092 # the peer's, fixed
T0=$SECONDS
log() { printf '[peer %4ds] %s\n' $((SECONDS - T0)) "$*" >&2; }

FERRY_PID=""
PEER_PID=""
KAFKA_STARTED=0
cleanup() {
	local rc=$?
	[ -n "$FERRY_PID" ] && kill "$FERRY_PID" 2>/dev/null || true
	[ -n "$PEER_PID" ] && "$PEER_BENCH_DIR/peer.sh" stop >/dev/null 2>&1 || true
	wait 2>/dev/null || true
	[ -x "$WORK/benchkit" ] && "$WORK/benchkit" topics --kafka "$KAFKA" --delete-prefix "_${RUN}_" >&2 || true
	[ "$KAFKA_STARTED" = 1 ] && scripts/kafka.sh down >&2 || true
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "building Ferry, the probe and benchkit"
go build -o "$WORK/" ./cmd/bridge ./cmd/probe ./bench/benchkit
if ! (exec 3<>/dev/tcp/127.0.0.1/9092) 2>/dev/null; then
	[ "$(scripts/kafka.sh up | tail -n 1)" = "$KAFKA" ] || { log "scripts/kafka.sh did not start Kafka on $KAFKA"; exit 1; }
	KAFKA_STARTED=1
fi

log "starting the peer ($PEER_BENCH_DIR)"
if ! PEER_PID=$("$PEER_BENCH_DIR/peer.sh" start 2>"$OUT/logs/peer-start.txt" | tail -n 1); then
	log "peer not started ($(tail -n 1 "$OUT/logs/peer-start.txt")): building it"
	"$PEER_BENCH_DIR/peer.sh" build >"$OUT/logs/peer-build.txt" 2>&1 || { log "peer build failed: $OUT/logs/peer-build.txt"; exit 1; }
	PEER_PID=$("$PEER_BENCH_DIR/peer.sh" start | tail -n 1)
fi

log "starting Ferry"
mkdir -p "$WORK/ferry"
cfg=()
[ -n "${FERRY_CONFIG:-}" ] && cfg=(--config "$(cd "$(dirname "$FERRY_CONFIG")" && pwd)/$(basename "$FERRY_CONFIG")")
(cd "$WORK/ferry" && FERRY_INSTANCE_ID="ferry-$RUN" FERRY_HTTP_PPROF="$([ -n "${PEER_PROFILE:-}" ] && echo true || echo false)" \
	FERRY_LOG_LEVEL=warn exec "$WORK/bridge" "${cfg[@]}" --kafka "$KAFKA" --mqtt-listen 127.0.0.1:21883 \
	--http-listen 127.0.0.1:21884) >"$OUT/logs/ferry.log" 2>&1 &
FERRY_PID=$!
for _ in $(seq 300); do
	curl -fsS http://127.0.0.1:21884/readyz >/dev/null 2>&1 && break
	kill -0 "$FERRY_PID" 2>/dev/null || break
	sleep 0.1
done
curl -fsS http://127.0.0.1:21884/readyz >/dev/null || { tail -n 20 "$OUT/logs/ferry.log" >&2; log "Ferry not ready"; exit 1; }
KAFKA_PIDS=$(kafka_pids)

{
	echo "Ferry: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' + working tree')$([ -n "${FERRY_CONFIG:-}" ] && echo " config $FERRY_CONFIG")   peer: $PEER_BENCH_DIR (pid $PEER_PID)"
	echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')   kafka: $KAFKA (pids ${KAFKA_PIDS:-not on this machine})"
	echo "load: probe mqtt-to-kafka --ack-only --qos 1 --clients $PEER_CLIENTS --inflight $PEER_INFLIGHT, payloads $PEER_PAYLOADS, $PEER_COUNT msgs at 12 B (a quarter at larger sizes), $PEER_ROUNDS rounds"
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/env.txt" >&2

# One untimed run per system and payload first: the JVMs (the peer's, Kafka's) compile their hot
# paths and every topic exists before the first measured round.
for size in $PEER_PAYLOADS; do
	for s in peer ferry; do
		if [ "$s" = peer ]; then port=24883 topic="peer/$RUN/$size"; else port=21883 topic="/$RUN/fwd$size"; fi
		log "warm-up, $size B, $s"
		timeout --signal=INT --kill-after=10 $((90 + PEER_COUNT / 4000)) "$WORK/probe" mqtt-to-kafka \
			--mqtt "tcp://127.0.0.1:$port" --ack-only --topic "$topic" --qos 1 --payload-size "$size" \
			--clients "$PEER_CLIENTS" --inflight "$PEER_INFLIGHT" --count $((PEER_COUNT / 4)) \
			>"$OUT/logs/warmup-$s-$size.txt" 2>&1 || log "probe exit $? (logs/warmup-$s-$size.txt)"
	done
done

echo "round,payload,system,load1,msg_s,ack_p50_ms,ack_p99_ms,bridge_cpu_us_msg,kafka_cpu_us_msg,probe_limit" >"$OUT/peer.csv"
for r in $(seq "$PEER_ROUNDS"); do
	for size in $PEER_PAYLOADS; do
		n=$PEER_COUNT
		((size > 100)) && n=$((PEER_COUNT / 4))
		order="peer ferry"
		((r % 2 == 0)) && order="ferry peer"
		for s in $order; do
			if [ "$s" = peer ]; then port=24883 pid=$PEER_PID topic="peer/$RUN/$size"; else port=21883 pid=$FERRY_PID topic="/$RUN/fwd$size"; fi
			l=$(load1)
			log "round $r, $size B, $s (load $l)"
			bt0=$(cpu_ticks "$pid")
			kt0=$(cpu_ticks $KAFKA_PIDS)
			if [ "$s" = ferry ] && [ -n "${PEER_PROFILE:-}" ]; then
				(sleep 2 && curl -fsS -o "$OUT/cpu-$r-$size.pprof" "http://127.0.0.1:21884/debug/pprof/profile?seconds=5") &
			fi
			f="$OUT/$s-$r-$size"
			timeout --signal=INT --kill-after=10 $((90 + n / 2000)) "$WORK/probe" mqtt-to-kafka \
				--mqtt "tcp://127.0.0.1:$port" --ack-only --topic "$topic" --qos 1 --payload-size "$size" \
				--clients "$PEER_CLIENTS" --inflight "$PEER_INFLIGHT" --count "$n" --warmup $((n / 10)) \
				--csv "$f.csv" >"$f.txt" 2>&1 || log "probe exit $? ($f.txt)"
			bt1=$(cpu_ticks "$pid")
			kt1=$(cpu_ticks $KAFKA_PIDS)
			limit=0
			grep -q 'PROBE IS THE LIMIT' "$f.txt" && limit=1 && log "round $r $s: the probe says it was the limit"
			kcpu=""
			[ -n "$KAFKA_PIDS" ] && kcpu=$(us_per_msg $((kt1 - kt0)) "$n")
			echo "$r,$size,$s,$l,$(field "$f.csv" ack throughput_msg_s),$(field "$f.csv" ack p50_ms),$(field "$f.csv" ack p99_ms),$(us_per_msg $((bt1 - bt0)) "$n"),$kcpu,$limit" >>"$OUT/peer.csv"
			tail -n 1 "$OUT/peer.csv" >&2
		done
	done
done

python3 - "$OUT/peer.csv" <<'EOF' | tee "$OUT/summary.txt"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
cols = ["msg_s", "ack_p50_ms", "ack_p99_ms", "bridge_cpu_us_msg", "kafka_cpu_us_msg"]
def med(size, s, c):
    v = [float(r[c]) for r in rows if r["payload"] == size and r["system"] == s and r[c]]
    return statistics.median(v) if v else float("nan")
for size in dict.fromkeys(r["payload"] for r in rows):
    n = sum(1 for r in rows if r["payload"] == size and r["system"] == "ferry")
    print("payload %s B, median of %d rounds   %s" % (size, n, "   ".join(cols)))
    m = {s: {c: med(size, s, c) for c in cols} for s in ("peer", "ferry")}
    for s in ("peer", "ferry"):
        print("%-12s %s" % (s, "   ".join("%.3f" % m[s][c] for c in cols)))
    print("%-12s %s" % ("ferry/peer", "   ".join(("%.3f" % (m["ferry"][c] / m["peer"][c])) if m["peer"][c] else "-" for c in cols)))
EOF
log "load average at end: $(cut -d' ' -f1-3 /proc/loadavg); results in $OUT"
