#!/usr/bin/env bash
# bench.sh - Ferry side by side with Mosquitto alone (the MQTT ceiling, no Kafka), Mosquitto + the
# plain forwarder (bench/forwarder) and kafka-producer-perf-test, in one run on one machine (issue 17).
#
# Usage:
#   scripts/bench.sh [--quick] [--out DIR]
#
#   --quick    tiny counts: checks that every part works (~3-4 minutes); figures are not meant to be read
#   --out DIR  output directory (default bench-results/<timestamp>/, git-ignored)
#
# Matrix (every cell runs Ferry, Mosquitto alone and Mosquitto + forwarder with the same load generator:
# the probe's raw MQTT engine, QoS 1 with BENCH_INFLIGHT publishes in flight per connection, closed loop):
#   QoS 0 and 1 x payload 12 B and 1 KiB x 1 and 100 topics x 1 and 4 connections,
# plus kafka-producer-perf-test acks=all per payload with Ferry's batch settings (linger 0, 1000 records or
# 1 MiB per batch) and with the producer's defaults, plus one Kafka -> MQTT run with the per-hop figures
# (kafka, bridge, e2e). For QoS 0 the table reports what reached Kafka, and what Ferry counted as dropped.
# The full matrix takes about 10 minutes on 2 cores. Run it on a quiet machine: the load average before
# each run is in the table and env.txt.
#
# Outputs in DIR: summary.md (the markdown tables, with the ratios Ferry/Mosquitto-alone, Ferry/forwarder,
# Ferry/raw), matrix.csv (system,topics,load1,bridge_dropped + the probe's CSV columns), env.txt, logs/.
#
# Environment (space-separated lists): BENCH_QOS ("0 1"), BENCH_PAYLOADS ("12 1024"), BENCH_CLIENTS
# ("1 4"), BENCH_TOPICS ("1 100"), BENCH_COUNT (messages per 12 B Ferry/Mosquitto run, 400000; 1 KiB runs
# send half), BENCH_FWD_DIV (the forwarder runs send COUNT/DIV, 8), BENCH_INFLIGHT (256), BENCH_RAW_COUNT
# (perf-test records at 12 B, 3000000; 1 KiB: a sixth), BENCH_REV_COUNT (20000) at BENCH_REV_RATE (1000/s),
# BENCH_KEEP_TOPICS=1 keeps the run's Kafka topics (deleted at the end by default).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

QUICK=0
OUT=""
while [ $# -gt 0 ]; do
	case "$1" in
	--quick) QUICK=1 ;;
	--out) OUT="$2"; shift ;;
	-h | --help) sed -n '2,28p' "$0"; exit 0 ;;
	*) echo "bench.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

if [ "$QUICK" = 1 ]; then
	MODE=quick
	: "${BENCH_COUNT:=20000}" "${BENCH_RAW_COUNT:=200000}" "${BENCH_REV_COUNT:=2000}"
else
	MODE=full
	: "${BENCH_COUNT:=400000}" "${BENCH_RAW_COUNT:=3000000}" "${BENCH_REV_COUNT:=20000}"
fi
: "${BENCH_QOS:=0 1}" "${BENCH_PAYLOADS:=12 1024}" "${BENCH_CLIENTS:=1 4}" "${BENCH_TOPICS:=1 100}"
: "${BENCH_FWD_DIV:=8}" "${BENCH_INFLIGHT:=256}" "${BENCH_REV_RATE:=1000}" "${BENCH_KEEP_TOPICS:=0}"

STAMP="$(date +%Y%m%d-%H%M%S)"
OUT="${OUT:-$ROOT/bench-results/$STAMP}"
mkdir -p "$OUT/logs"
MATRIX="$OUT/matrix.csv"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/ferry-bench.XXXXXX")"
RUN="r$(date +%s)" # topic namespace of this run (no '_': it maps to '/')
PREFIX="_bench_${RUN}_"
START_S=$SECONDS

log() { printf '[bench %3ds] %s\n' $((SECONDS - START_S)) "$*" >&2; }
die() { log "error: $*"; exit 1; }
load1() { cut -d' ' -f1 /proc/loadavg; }

# ----------------------------------------------------------------- cleanup
PIDS=()
KAFKA_STARTED=0
KAFKA=""
cleanup() {
	local rc=$?
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	done
	if [ -n "$KAFKA" ] && [ "$BENCH_KEEP_TOPICS" != 1 ] && [ -x "$WORK/bin/benchkit" ]; then
		log "deleting this run's topics ($PREFIX*)"
		"$WORK/bin/benchkit" topics --kafka "$KAFKA" --delete-prefix "$PREFIX" >&2 || true
	fi
	if [ "$KAFKA_STARTED" = 1 ]; then
		log "stopping the Kafka broker this run started"
		scripts/kafka.sh down >&2 || true
	fi
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
	done
	die "no free port"
}
wait_port() {
	local deadline=$((SECONDS + $2))
	while [ $SECONDS -lt $deadline ]; do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# ----------------------------------------------------------------- build, Kafka, environment
log "mode $MODE, output $OUT"
mkdir -p "$WORK/bin"
go build -o "$WORK/bin/" ./cmd/bridge ./cmd/probe ./bench/forwarder ./bench/benchkit
BIN="$WORK/bin"
command -v mosquitto >/dev/null || [ -x /usr/sbin/mosquitto ] || die "mosquitto not installed (apt-get install -y mosquitto)"
MOSQUITTO="$(command -v mosquitto || echo /usr/sbin/mosquitto)"

if scripts/kafka.sh status >/dev/null 2>&1; then
	KAFKA="$(scripts/kafka.sh addr)"
	log "using the running Kafka at $KAFKA"
else
	log "starting Kafka"
	KAFKA="$(scripts/kafka.sh up | tail -n 1)"
	KAFKA_STARTED=1
fi

{
	echo "mode: $MODE   run: $RUN   date: $(date -Is)"
	echo "host: $(uname -srm), $(nproc) cores, $(free -m | awk '/Mem:/{print $2" MiB RAM"}')"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
	echo "go: $(go version | cut -d' ' -f3)   kafka: ${KAFKA_VERSION:-4.4.0} at $KAFKA   mosquitto: $("$MOSQUITTO" -h 2>/dev/null | head -1 | awk '{print $3}')"
	echo "git: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (dirty tree)')"
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "load generator: probe mqtt-to-kafka, raw MQTT engine, closed loop, QoS 1 with --inflight $BENCH_INFLIGHT per connection"
	echo "counts: $BENCH_COUNT per 12 B run (1 KiB: half; forwarder: /$BENCH_FWD_DIV), perf-test $BENCH_RAW_COUNT at 12 B"
} >"$OUT/env.txt"

QOSES=($BENCH_QOS) PAYLOADS=($BENCH_PAYLOADS) CLIENTS=($BENCH_CLIENTS) NTOPICS=($BENCH_TOPICS)

# ----------------------------------------------------------------- topics (1 partition, LogAppendTime)
TOPICS=("${PREFIX}rev")
for sys in f w; do
	for n in "${NTOPICS[@]}"; do
		if [ "$n" = 1 ]; then TOPICS+=("${PREFIX}${sys}_t1"); else
			for i in $(seq 0 $((n - 1))); do TOPICS+=("${PREFIX}${sys}_t${n}_$i"); done
		fi
	done
done
for p in "${PAYLOADS[@]}"; do TOPICS+=("${PREFIX}raw_${p}_ferrybat" "${PREFIX}raw_${p}_kafkadefs"); done
log "creating ${#TOPICS[@]} topics"
"$BIN/benchkit" topics --kafka "$KAFKA" "${TOPICS[@]}"

# ----------------------------------------------------------------- systems under test
FERRY_PORT=$(free_port) FERRY_HTTP=$(free_port) MOSQ_ALONE=$(free_port) MOSQ_FWD=$(free_port)
cat >"$WORK/ferry.yaml" <<EOF
instance:
  id: ferry-bench-$RUN
mqtt:
  listen: 127.0.0.1:$FERRY_PORT
kafka:
  brokers: [$KAFKA]
reverse:
  topics: [${PREFIX}rev]
  start_offset: earliest
http:
  listen: 127.0.0.1:$FERRY_HTTP
log:
  level: warn
EOF
"$BIN/bridge" --config "$WORK/ferry.yaml" >"$OUT/logs/ferry.log" 2>&1 &
PIDS+=($!)
FERRY_PID=$!

# Mosquitto as a user would run it for this job; the forwarder's instance gets the two limits raised so
# that it does not drop QoS 1 messages for its subscriber under load (defaults: 20 in flight, 1000 queued).
for port in $MOSQ_ALONE $MOSQ_FWD; do
	cat >"$WORK/mosquitto-$port.conf" <<EOF
listener $port 127.0.0.1
allow_anonymous true
persistence false
max_inflight_messages 1000
max_queued_messages 1000000
log_dest stderr
log_type error
log_type warning
EOF
	"$MOSQUITTO" -c "$WORK/mosquitto-$port.conf" >"$OUT/logs/mosquitto-$port.log" 2>&1 &
	PIDS+=($!)
	wait_port "$port" 15 || die "mosquitto did not listen on $port"
done
"$BIN/forwarder" --mqtt "tcp://127.0.0.1:$MOSQ_FWD" --filter '#' --qos 1 --kafka "$KAFKA" --stats-every 5s \
	>"$OUT/logs/forwarder.log" 2>&1 &
PIDS+=($!)

ready=0
for _ in $(seq 300); do
	if curl -fsS "http://127.0.0.1:$FERRY_HTTP/readyz" >/dev/null 2>&1; then ready=1; break; fi
	kill -0 "$FERRY_PID" 2>/dev/null || break
	sleep 0.1
done
[ "$ready" = 1 ] || { tail -20 "$OUT/logs/ferry.log" >&2; die "Ferry not ready"; }
for _ in $(seq 100); do grep -q subscribed "$OUT/logs/forwarder.log" && break; sleep 0.1; done
grep -q subscribed "$OUT/logs/forwarder.log" || { cat "$OUT/logs/forwarder.log" >&2; die "forwarder not subscribed"; }
log "systems ready: Ferry :$FERRY_PORT, Mosquitto alone :$MOSQ_ALONE, Mosquitto + forwarder :$MOSQ_FWD"

ferry_dropped() {
	curl -fsS "http://127.0.0.1:$FERRY_HTTP/metrics" 2>/dev/null | awk '/^ferry_dropped_total/ {s += $NF} END {printf "%d\n", s}'
}

HEADER_WRITTEN=0
# append_csv SYSTEM TOPICS LOAD DROPPED FILE: prefix the probe's CSV rows.
append_csv() {
	local f="$5"
	[ -s "$f" ] || { log "no CSV from $1"; return 0; }
	if [ "$HEADER_WRITTEN" = 0 ]; then
		printf 'system,topics,load1,bridge_dropped,%s\n' "$(head -n 1 "$f")" >"$MATRIX"
		HEADER_WRITTEN=1
	fi
	tail -n +2 "$f" | sed "s|^|$1,$2,$3,$4,|" >>"$MATRIX"
}

LIMITED=0
# probe_cell SYSTEM QOS PAYLOAD TOPICS CLIENTS COUNT [warmup]: one run, appended to the matrix
# unless it is a warm-up.
probe_cell() {
	local sys=$1 q=$2 p=$3 n=$4 c=$5 count=$6 warm=${7:-}
	local url topic extra=() name="$1-q$2-p$3-t$4-c$5${7:+-warmup}"
	case "$sys" in
	ferry) url="tcp://127.0.0.1:$FERRY_PORT" topic="/bench/$RUN/f/t$n" ;;
	forwarder) url="tcp://127.0.0.1:$MOSQ_FWD" topic="/bench/$RUN/w/t$n" ;;
	mosquitto) url="tcp://127.0.0.1:$MOSQ_ALONE" topic="/bench/$RUN/a/t$n" extra=(--ack-only) ;;
	esac
	[ "$q" = 0 ] || extra+=(--inflight "$BENCH_INFLIGHT")
	[ "$n" = 1 ] || extra+=(--topics "$n")
	local wait=5s
	# QoS 0 losses never arrive: do not wait long for them. Mosquitto acknowledges before the
	# forwarder has the message: give its backlog time to reach Kafka, so that `lost` means lost
	# and no straggler spills into the next run.
	[ "$q" = 0 ] && wait=3s
	[ "$sys" = forwarder ] && [ "$q" != 0 ] && wait=30s
	local csv="$WORK/$name.csv" rc=0 load d0=0 d1=0
	load=$(load1)
	[ "$sys" = ferry ] && d0=$(ferry_dropped)
	log "$name: $count msgs (load $load)"
	timeout --signal=INT --kill-after=10 $((90 + count / 2000)) "$BIN/probe" mqtt-to-kafka --mqtt "$url" --kafka "$KAFKA" \
		--topic "$topic" --qos "$q" --payload-size "$p" --clients "$c" --count "$count" --warmup $((count / 10)) \
		--timeout "$wait" --csv "$csv" "${extra[@]}" >"$OUT/logs/$name.txt" 2>&1 || rc=$?
	[ "$rc" = 0 ] || [ "$rc" = 3 ] || log "$name: probe exit $rc (logs/$name.txt)"
	[ "$sys" = ferry ] && d1=$(ferry_dropped)
	if grep -q 'PROBE IS THE LIMIT' "$OUT/logs/$name.txt"; then
		LIMITED=$((LIMITED + 1))
		log "$name: the probe says it was the limit (logs/$name.txt)"
	fi
	[ -n "$warm" ] || append_csv "$sys" "$n" "$load" $((d1 - d0)) "$csv"
}

# ----------------------------------------------------------------- raw Kafka
perftest() {
	local bound=$1
	shift
	timeout "$bound" scripts/kafka.sh tool org.apache.kafka.tools.ProducerPerformance --bootstrap-server "$KAFKA" "$@"
}
for p in "${PAYLOADS[@]}"; do
	n=$BENCH_RAW_COUNT
	[ "$p" -le 100 ] || n=$((BENCH_RAW_COUNT / 6))
	# Ferry's batching: linger 0, at most 1000 records or 1 MiB per request (bridge kafka.max_batch,
	# kafka.max_batch_bytes): batch.size in bytes for 1000 records of this size (~10 B record overhead).
	bs=$((1000 * (p + 10) + 61))
	[ "$bs" -le 1048576 ] || bs=1048576
	for set in ferrybat kafkadefs; do
		props=(acks=all)
		[ "$set" = ferrybat ] && props+=(linger.ms=0 "batch.size=$bs")
		load=$(load1)
		log "raw ${p} B ($set: ${props[*]}): $n records (load $load)"
		perftest 300 --topic "${PREFIX}raw_${p}_$set" --num-records "$n" --throughput -1 --record-size "$p" \
			--command-property "${props[@]}" >"$OUT/logs/raw-$p-$set.txt" 2>&1 || log "raw $p $set: perf test failed"
		"$BIN/benchkit" perfcsv --payload-bytes "$p" --rate -1 <"$OUT/logs/raw-$p-$set.txt" >"$WORK/raw-$p-$set.csv" ||
			log "raw $p $set: no summary"
		append_csv "raw-$set" 1 "$load" 0 "$WORK/raw-$p-$set.csv"
	done
done

# ----------------------------------------------------------------- warm-up (not reported)
# The first publishes to a topic set make every system look its topics up (Ferry's producer, the
# forwarder, Kafka's metadata); one short QoS 1 run per system and topic count keeps that out of the
# first cell of the matrix.
for n in "${NTOPICS[@]}"; do
	for sys in ferry mosquitto forwarder; do
		probe_cell "$sys" 1 12 "$n" 1 $((n * 20 + 1000)) warmup
	done
done

# ----------------------------------------------------------------- the matrix
for q in "${QOSES[@]}"; do for p in "${PAYLOADS[@]}"; do for n in "${NTOPICS[@]}"; do for c in "${CLIENTS[@]}"; do
	count=$BENCH_COUNT
	[ "$p" -le 100 ] || count=$((BENCH_COUNT / 2))
	probe_cell ferry "$q" "$p" "$n" "$c" "$count"
	probe_cell mosquitto "$q" "$p" "$n" "$c" "$count"
	probe_cell forwarder "$q" "$p" "$n" "$c" $((count / BENCH_FWD_DIV))
done; done; done; done

# ----------------------------------------------------------------- Kafka -> MQTT per hop
load=$(load1)
log "reverse: probe kafka-to-mqtt $BENCH_REV_COUNT at $BENCH_REV_RATE/s (load $load)"
rc=0
timeout --signal=INT --kill-after=10 $((120 + BENCH_REV_COUNT / BENCH_REV_RATE * 2)) "$BIN/probe" kafka-to-mqtt \
	--mqtt "tcp://127.0.0.1:$FERRY_PORT" --kafka "$KAFKA" --topic "/bench/$RUN/rev" --kafka-topic "${PREFIX}rev" \
	--count "$BENCH_REV_COUNT" --rate "$BENCH_REV_RATE" --qos 1 --warmup $((BENCH_REV_RATE / 2)) --csv "$WORK/rev.csv" \
	>"$OUT/logs/reverse.txt" 2>&1 || rc=$?
[ "$rc" = 0 ] || [ "$rc" = 3 ] || log "reverse: probe exit $rc (logs/reverse.txt)"
append_csv ferry-reverse 1 "$load" 0 "$WORK/rev.csv"

# ----------------------------------------------------------------- summary
{
	echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "elapsed: $((SECONDS - START_S)) s"
	echo "runs where the probe reported itself as the limit: $LIMITED (grep 'PROBE IS THE LIMIT' logs/)"
	echo "forwarder: $(tail -n 1 "$OUT/logs/forwarder.log")"
} >>"$OUT/env.txt"
[ -s "$MATRIX" ] || die "no results"
"$BIN/benchkit" matrix --csv "$MATRIX" --env "$OUT/env.txt" >"$OUT/summary.md"
log "done in $((SECONDS - START_S)) s: $OUT/summary.md"
cat "$OUT/summary.md"
