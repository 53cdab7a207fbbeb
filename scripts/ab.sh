#!/usr/bin/env bash
# ab.sh - A/B of two Ferry builds in one run on one machine: what a change costs.
#
#   scripts/ab.sh REF        A = cmd/bridge built at git REF, B = the working tree
#
# Both bridges run side by side on one Kafka (each with its own MQTT port, state topics and reverse
# topic). Rounds alternate A and B, A first in odd rounds and B first in even ones, so that drift of
# the machine and the order hit both alike:
#   forward  probe mqtt-to-kafka, QoS 1, 12 B, AB_CLIENTS connections x AB_INFLIGHT in flight,
#            AB_FWD_COUNT messages; --ack-only: the PUBACK rate (Ferry acknowledges after Kafka acks=all),
#            the probe does not read Kafka back; also records per produce batch and CPU per message of
#            the bridge and of Kafka (its JVM when it runs on this machine)
#   reverse  probe kafka-to-mqtt, QoS 1, AB_REV_COUNT records at AB_REV_RATE/s: the bridge's share
#            (MQTT receive - the probe's own Kafka receive, one clock)
# It prints a table per round and the medians with the ratio B/A. Run it on a quiet machine: the load
# average is printed before every run. The probe says when it was the limit ("PROBE IS THE LIMIT").
#
# Environment: AB_ROUNDS (4), AB_FWD_COUNT (2000000), AB_CLIENTS (4), AB_INFLIGHT (256),
# AB_REV_COUNT (20000), AB_REV_RATE (1000), AB_OUT (output dir, default bench-results/ab-<timestamp>),
# AB_PROFILE (set: a 5 s CPU profile of the bridge during each forward run, cpu-ROUND-SYSTEM.pprof).
# Uses FERRY_TEST_KAFKA when set, else the Kafka of scripts/kafka.sh when it runs, else starts one (and
# stops it). The run's Kafka topics are deleted at the end.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[ $# -eq 1 ] || { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
REF=$1
git rev-parse --verify -q "$REF^{commit}" >/dev/null || { echo "ab.sh: unknown git revision $REF" >&2; exit 2; }
: "${AB_ROUNDS:=4}" "${AB_FWD_COUNT:=2000000}" "${AB_CLIENTS:=4}" "${AB_INFLIGHT:=256}"
: "${AB_REV_COUNT:=20000}" "${AB_REV_RATE:=1000}"
OUT="${AB_OUT:-$ROOT/bench-results/ab-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT/logs"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/ferry-ab.XXXXXX")"
RUN="ab$(date +%s)"
T0=$SECONDS
log() { printf '[ab %4ds] %s\n' $((SECONDS - T0)) "$*" >&2; }
# shellcheck source=lib/measure.sh
source "$ROOT/scripts/lib/measure.sh"

PIDS=()
KAFKA_STARTED=0
KAFKA=""
cleanup() {
	local rc=$?
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[ -x "$WORK/benchkit" ] && "$WORK/benchkit" topics --kafka "$KAFKA" --delete-prefix "_${RUN}_" >&2 || true
	git worktree remove --force "$WORK/a-src" 2>/dev/null || true
	[ "$KAFKA_STARTED" = 1 ] && scripts/kafka.sh down >&2 || true
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "building A ($REF) and B (working tree)"
git worktree add -q --detach "$WORK/a-src" "$REF"
(cd "$WORK/a-src" && go build -o "$WORK/a-bridge" ./cmd/bridge)
go build -o "$WORK/b-bridge" ./cmd/bridge
go build -o "$WORK/" ./cmd/probe ./bench/benchkit
if [ -n "${FERRY_TEST_KAFKA:-}" ]; then
	KAFKA=$FERRY_TEST_KAFKA
elif scripts/kafka.sh status >/dev/null 2>&1; then
	KAFKA="$(scripts/kafka.sh addr)"
else
	KAFKA="$(scripts/kafka.sh up | tail -n 1)"
	KAFKA_STARTED=1
fi

"$WORK/benchkit" topics --kafka "$KAFKA" "_${RUN}_reva" "_${RUN}_revb" >&2

# start_bridge NAME MQTT_PORT HTTP_PORT: its own instance id, reverse topic and working directory.
start_bridge() {
	mkdir -p "$WORK/$1"
	cat >"$WORK/$1/ferry.yaml" <<EOF
instance:
  id: ferry-$RUN-$1
mqtt:
  listen: 127.0.0.1:$2
kafka:
  brokers: [$KAFKA]
reverse:
  topics: [_${RUN}_rev$1]
  start_offset: latest
http:
  listen: 127.0.0.1:$3
  pprof: $([ -n "${AB_PROFILE:-}" ] && echo true || echo false)
log:
  level: warn
EOF
	(cd "$WORK/$1" && exec "$WORK/$1-bridge" --config ferry.yaml) >"$OUT/logs/$1.log" 2>&1 &
	PIDS+=($!)
	for _ in $(seq 300); do
		curl -fsS "http://127.0.0.1:$3/readyz" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	tail -20 "$OUT/logs/$1.log" >&2
	log "bridge $1 not ready"
	exit 1
}
start_bridge a 21883 21884
start_bridge b 22883 22884
{
	echo "A: $REF ($(git rev-parse --short "$REF"))   B: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' + working tree')"
	echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')   kafka: $KAFKA"
	echo "forward: --ack-only --qos 1 --payload-size 12 --clients $AB_CLIENTS --inflight $AB_INFLIGHT --count $AB_FWD_COUNT"
	echo "reverse: --qos 1 --count $AB_REV_COUNT --rate $AB_REV_RATE"
} | tee "$OUT/env.txt" >&2

KAFKA_PIDS=$(kafka_pids)

echo "round,system,load1,fwd_msg_s,fwd_ack_p50_ms,fwd_ack_p99_ms,rev_bridge_p50_ms,rev_bridge_p99_ms,fwd_records_per_batch,fwd_bridge_cpu_us_msg,fwd_kafka_cpu_us_msg" >"$OUT/ab.csv"
for r in $(seq "$AB_ROUNDS"); do
	order="a b"
	((r % 2 == 0)) && order="b a" # A B B A A B ...: neither always runs first (an A/A run showed it matters)
	for s in $order; do
		port=21883
		[ "$s" = b ] && port=22883
		l=$(load1)
		log "round $r $s: forward (load $l)"
		hp=21884
		[ "$s" = b ] && hp=22884
		bpid=${PIDS[0]}
		[ "$s" = b ] && bpid=${PIDS[1]}
		read -r bs0 bc0 < <(batch_stats "$hp")
		bt0=$(cpu_ticks "$bpid")
		kt0=$(cpu_ticks $KAFKA_PIDS)
		if [ -n "${AB_PROFILE:-}" ]; then # a CPU profile of the bridge in the middle of the run
			(sleep 3 && curl -fsS -o "$OUT/cpu-$r-$s.pprof" "http://127.0.0.1:$hp/debug/pprof/profile?seconds=5") &
		fi
		timeout --signal=INT --kill-after=10 $((90 + AB_FWD_COUNT / 2000)) "$WORK/probe" mqtt-to-kafka \
			--mqtt "tcp://127.0.0.1:$port" --ack-only --topic "/$RUN/fwd$s" --qos 1 --payload-size 12 \
			--clients "$AB_CLIENTS" --inflight "$AB_INFLIGHT" --count "$AB_FWD_COUNT" --warmup $((AB_FWD_COUNT / 10)) \
			--csv "$OUT/fwd-$r-$s.csv" >"$OUT/logs/fwd-$r-$s.txt" 2>&1 || log "probe exit $? (logs/fwd-$r-$s.txt)"
		read -r bs1 bc1 < <(batch_stats "$hp")
		bt1=$(cpu_ticks "$bpid")
		kt1=$(cpu_ticks $KAFKA_PIDS)
		# Per acknowledged message of the whole run (warm-up included): records per produce batch,
		# CPU of the bridge and of Kafka (empty when Kafka's pid is not on this machine).
		fwd_extra=$(awk -v bs=$((bs1 - bs0)) -v bc=$((bc1 - bc0)) -v bt=$((bt1 - bt0)) -v kt=$((kt1 - kt0)) \
			-v n="$AB_FWD_COUNT" -v tick="$TICK" -v k="$KAFKA_PIDS" 'BEGIN {
				printf "%.1f,%.2f,", (bc ? bs / bc : 0), bt / tick * 1e6 / n
				if (k != "") printf "%.2f", kt / tick * 1e6 / n }')
		grep -q 'PROBE IS THE LIMIT' "$OUT/logs/fwd-$r-$s.txt" && log "round $r $s: the probe says it was the limit"
		log "round $r $s: reverse (load $(load1))"
		timeout --signal=INT --kill-after=10 $((120 + AB_REV_COUNT / AB_REV_RATE * 2)) "$WORK/probe" kafka-to-mqtt \
			--mqtt "tcp://127.0.0.1:$port" --kafka "$KAFKA" --topic "/$RUN/rev$s" --kafka-topic "_${RUN}_rev$s" \
			--qos 1 --count "$AB_REV_COUNT" --rate "$AB_REV_RATE" --warmup $((AB_REV_RATE / 2)) \
			--csv "$OUT/rev-$r-$s.csv" >"$OUT/logs/rev-$r-$s.txt" 2>&1 || log "probe exit $? (logs/rev-$r-$s.txt)"
		f="$OUT/fwd-$r-$s.csv" v="$OUT/rev-$r-$s.csv"
		echo "$r,$s,$l,$(field "$f" ack throughput_msg_s),$(field "$f" ack p50_ms),$(field "$f" ack p99_ms),$(field "$v" bridge p50_ms),$(field "$v" bridge p99_ms),$fwd_extra" >>"$OUT/ab.csv"
		tail -n 1 "$OUT/ab.csv" >&2
	done
done

# Medians per system and the ratio B/A.
python3 - "$OUT/ab.csv" <<'EOF' | tee "$OUT/summary.txt"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
cols = ["fwd_msg_s", "fwd_ack_p50_ms", "fwd_ack_p99_ms", "rev_bridge_p50_ms", "rev_bridge_p99_ms",
        "fwd_records_per_batch", "fwd_bridge_cpu_us_msg", "fwd_kafka_cpu_us_msg"]
med = {}
for s in "ab":
    med[s] = {}
    for c in cols:
        v = [float(r[c]) for r in rows if r["system"] == s and r[c]]
        med[s][c] = statistics.median(v) if v else float("nan")
print("median of %d rounds   %s" % (len(rows) // 2, "   ".join(cols)))
for s in "ab":
    print("%-20s %s" % ("A" if s == "a" else "B", "   ".join("%.3f" % med[s][c] for c in cols)))
print("%-20s %s" % ("B/A", "   ".join("%.3f" % (med["b"][c] / med["a"][c]) if med["a"][c] else "-" for c in cols)))
EOF
log "load average at end: $(cut -d' ' -f1-3 /proc/loadavg); results in $OUT"
