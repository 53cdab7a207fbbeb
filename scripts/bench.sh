#!/usr/bin/env bash
# bench.sh - Ferry vs raw Kafka vs Mosquitto + a plain forwarder, in one run on this machine
# (issue 10). Reproduces the reference tests (../shared/reference/seeds.md §1) and measures the
# rows of the Targets table (../shared/DESIGN.md).
#
# Usage:
#   scripts/bench.sh [--quick] [--out DIR] [--no-profile]
#
#   --quick       reduced counts and matrix, bounded to ~5 minutes (full run: ~45 minutes)
#   --out DIR     output directory (default bench-results/<timestamp>/, git-ignored)
#   --no-profile  skip the pprof capture of the Ferry throughput run
#
# What runs (all on 127.0.0.1; Kafka from scripts/kafka.sh, started only if not running and
# then stopped at the end):
#   ref1           probe mqtt-to-kafka: N QoS1 12 B messages, one publisher, closed loop (Ferry)
#   ref2-perftest  kafka-producer-perf-test --throughput 1000 --payload-file (12 B lines) ->
#                  Ferry reverse path -> benchkit recv on MQTT (joined by order, CreateTime)
#   ref2-probe     probe kafka-to-mqtt at 1000/s (probe as producer)
#   raw-<P>B       kafka-producer-perf-test acks=all, unthrottled: the ceiling
#   throughput     probe mqtt-to-kafka, payload x QoS x publishers, Ferry and Mosquitto +
#                  bench/forwarder; open (pipelined, saturating) and, in the full run, closed loop
#   latency-<R>    probe mqtt-to-kafka open loop at R msg/s (QoS1, 12 B), Ferry and forwarder
#   profile        CPU and allocation profiles of Ferry during a throughput run
#
# Outputs in DIR: results.csv (scenario,system, then the probe's CSV columns), summary.md
# (tables with Ferry/raw and Ferry/forwarder ratios of this run), env.txt, logs/, profiles.
#
# Environment overrides (space-separated lists): BENCH_PAYLOADS, BENCH_QOS, BENCH_CLIENTS,
# BENCH_RATES, BENCH_TPUT_COUNT, BENCH_REF1_COUNT, BENCH_REF2_COUNT, BENCH_RAW_COUNT,
# BENCH_LAT_SECONDS, BENCH_TPUT_LOOPS (open closed), BENCH_SATURATE_RATE, BENCH_BUDGET (seconds; scenarios that would start past it are skipped).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

QUICK=0
OUT=""
PROFILE=1
while [ $# -gt 0 ]; do
	case "$1" in
	--quick) QUICK=1 ;;
	--out) OUT="$2"; shift ;;
	--no-profile) PROFILE=0 ;;
	-h | --help) sed -n '2,30p' "$0"; exit 0 ;;
	*) echo "bench.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

if [ "$QUICK" = 1 ]; then
	MODE=quick
	: "${BENCH_PAYLOADS:=12 1024}" "${BENCH_QOS:=0 1}" "${BENCH_CLIENTS:=1 10 100}"
	: "${BENCH_RATES:=1000 10000 50000}" "${BENCH_TPUT_COUNT:=10000}" "${BENCH_REF1_COUNT:=10000}"
	: "${BENCH_REF2_COUNT:=5000}" "${BENCH_RAW_COUNT:=200000}" "${BENCH_LAT_SECONDS:=2}"
	: "${BENCH_BUDGET:=270}" "${BENCH_PROFILE_SECONDS:=8}" "${BENCH_TPUT_LOOPS:=open}"
else
	MODE=full
	: "${BENCH_PAYLOADS:=12 1024}" "${BENCH_QOS:=0 1}" "${BENCH_CLIENTS:=1 10 100}"
	: "${BENCH_RATES:=1000 10000 50000}" "${BENCH_TPUT_COUNT:=200000}" "${BENCH_REF1_COUNT:=1000000}"
	: "${BENCH_REF2_COUNT:=200000}" "${BENCH_RAW_COUNT:=2000000}" "${BENCH_LAT_SECONDS:=20}"
	: "${BENCH_BUDGET:=2600}" "${BENCH_PROFILE_SECONDS:=30}" "${BENCH_TPUT_LOOPS:=open closed}"
fi

: "${BENCH_SATURATE_RATE:=1000000}"
STAMP="$(date +%Y%m%d-%H%M%S)"
OUT="${OUT:-$ROOT/bench-results/$STAMP}"
mkdir -p "$OUT/logs"
RESULTS="$OUT/results.csv"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/ferry-bench.XXXXXX")"
RUN="r$(date +%s)"           # topic namespace of this run (no '_': it maps to '/')
START_S=$SECONDS

log() { printf '[bench %3ds] %s\n' $((SECONDS - START_S)) "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ----------------------------------------------------------------- cleanup
PIDS=()
KAFKA_STARTED=0
cleanup() {
	local rc=$?
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	done
	if [ "$KAFKA_STARTED" = 1 ]; then
		log "stopping the Kafka broker this run started"
		scripts/kafka.sh down >&2 || true
	fi
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# budget_left SECONDS: true if a step of about SECONDS still fits in the budget.
budget_left() { [ $((SECONDS - START_S + $1)) -le "$BENCH_BUDGET" ]; }
SKIPPED=()
skip() { SKIPPED+=("$1"); log "SKIPPED (time budget): $1"; }

# free_port prints a loopback TCP port nobody listens on.
free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	die "no free port"
}

# wait_port PORT SECONDS: poll until something accepts on PORT.
wait_port() {
	local deadline=$((SECONDS + $2))
	while [ $SECONDS -lt $deadline ]; do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# ----------------------------------------------------------------- build
log "mode $MODE, output $OUT"
log "building binaries into $WORK/bin"
mkdir -p "$WORK/bin"
go build -o "$WORK/bin/" ./cmd/bridge ./cmd/probe ./bench/forwarder ./bench/benchkit
BIN="$WORK/bin"

# ----------------------------------------------------------------- Kafka
if scripts/kafka.sh status >/dev/null 2>&1; then
	KAFKA="$(scripts/kafka.sh addr)"
	log "using the running Kafka at $KAFKA"
else
	log "starting Kafka"
	KAFKA="$(scripts/kafka.sh up | tail -n 1)"
	KAFKA_STARTED=1
fi

# ----------------------------------------------------------------- environment
{
	echo "mode: $MODE   run: $RUN   date: $(date -Is)"
	echo "host: $(uname -srm), $(nproc) cores, $(free -m | awk '/Mem:/{print $2" MiB RAM"}')"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
	echo "go: $(go version | cut -d' ' -f3)   kafka: ${KAFKA_VERSION:-4.4.0} at $KAFKA   mosquitto: $(mosquitto -h 2>/dev/null | head -1 | awk '{print $3}')"
	echo "git: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (dirty tree)')"
	echo "uptime at start: $(uptime)"
	echo "NOTE: 2 cores shared with Kafka, the systems under test, the load generator and other"
	echo "      engineers' test runs: compare ratios within this run, not absolute figures."
} >"$OUT/env.txt"

# ----------------------------------------------------------------- topics
PAYLOADS=($BENCH_PAYLOADS) QOSES=($BENCH_QOS) CLIENTS=($BENCH_CLIENTS) RATES=($BENCH_RATES)
REV_PP="_bench_${RUN}_rev_pp"
REV_PROBE="_bench_${RUN}_rev_probe"
TOPICS=("$REV_PP" "$REV_PROBE" "_bench_${RUN}_ref1" "_bench_${RUN}_profile")
for sys in ferry forwarder; do
	for p in "${PAYLOADS[@]}"; do for q in "${QOSES[@]}"; do for c in "${CLIENTS[@]}"; do
		for loop in $BENCH_TPUT_LOOPS; do TOPICS+=("_bench_${RUN}_tp_${sys}_${loop}_${p}_${q}_${c}"); done
	done; done; done
	for r in "${RATES[@]}"; do TOPICS+=("_bench_${RUN}_lat_${sys}_${r}"); done
done
for p in "${PAYLOADS[@]}"; do TOPICS+=("_bench_${RUN}_raw_${p}"); done
log "creating ${#TOPICS[@]} topics (1 partition, LogAppendTime)"
"$BIN/benchkit" topics --kafka "$KAFKA" "${TOPICS[@]}"

# ----------------------------------------------------------------- systems under test
FERRY_MQTT_PORT=$(free_port)
FERRY_HTTP_PORT=$(free_port)
MOSQ_PORT=$(free_port)
cat >"$WORK/ferry.yaml" <<EOF
instance:
  id: ferry-bench-$RUN
mqtt:
  listen: 127.0.0.1:$FERRY_MQTT_PORT
kafka:
  brokers: [$KAFKA]
reverse:
  topics: [$REV_PP, $REV_PROBE]
  start_offset: earliest
http:
  listen: 127.0.0.1:$FERRY_HTTP_PORT
  pprof: true
log:
  level: warn
EOF
log "starting Ferry on 127.0.0.1:$FERRY_MQTT_PORT (http $FERRY_HTTP_PORT)"
"$BIN/bridge" --config "$WORK/ferry.yaml" >"$OUT/logs/ferry.log" 2>&1 &
PIDS+=($!)
FERRY_PID=$!

# Mosquitto as a user would run it for this job, with two limits raised so that it does not
# drop QoS 1 messages for the forwarder under load (defaults: 20 in flight, 1000 queued).
cat >"$WORK/mosquitto.conf" <<EOF
listener $MOSQ_PORT 127.0.0.1
allow_anonymous true
persistence false
max_inflight_messages 1000
max_queued_messages 1000000
log_dest stderr
log_type error
log_type warning
EOF
command -v mosquitto >/dev/null || die "mosquitto not installed (apt-get install -y mosquitto)"
log "starting Mosquitto on 127.0.0.1:$MOSQ_PORT"
mosquitto -c "$WORK/mosquitto.conf" >"$OUT/logs/mosquitto.log" 2>&1 &
PIDS+=($!)
wait_port "$MOSQ_PORT" 15 || die "mosquitto did not listen on $MOSQ_PORT"
"$BIN/forwarder" --mqtt "tcp://127.0.0.1:$MOSQ_PORT" --filter '#' --qos 1 --kafka "$KAFKA" --stats-every 5s \
	>"$OUT/logs/forwarder.log" 2>&1 &
PIDS+=($!)

ready=0
for _ in $(seq 300); do
	if curl -fsS "http://127.0.0.1:$FERRY_HTTP_PORT/readyz" >/dev/null 2>&1; then ready=1; break; fi
	kill -0 "$FERRY_PID" 2>/dev/null || break
	sleep 0.1
done
[ "$ready" = 1 ] || { tail -20 "$OUT/logs/ferry.log" >&2; die "Ferry not ready"; }
for _ in $(seq 100); do grep -q subscribed "$OUT/logs/forwarder.log" && break; sleep 0.1; done
grep -q subscribed "$OUT/logs/forwarder.log" || { cat "$OUT/logs/forwarder.log" >&2; die "forwarder not subscribed"; }
log "systems ready"

HEADER_WRITTEN=0
# append_csv SCENARIO SYSTEM FILE: prefix the probe's CSV rows with scenario,system.
append_csv() {
	local f="$3"
	[ -s "$f" ] || { log "no CSV from $1/$2"; return 0; }
	if [ "$HEADER_WRITTEN" = 0 ]; then
		printf 'scenario,system,%s\n' "$(head -n 1 "$f")" >"$RESULTS"
		HEADER_WRITTEN=1
	fi
	tail -n +2 "$f" | sed "s|^|$1,$2,|" >>"$RESULTS"
}

url_of() { case "$1" in ferry) echo "tcp://127.0.0.1:$FERRY_MQTT_PORT" ;; forwarder) echo "tcp://127.0.0.1:$MOSQ_PORT" ;; esac; }

# probe_m2k SCENARIO SYSTEM TOPICSUFFIX BOUND_SECONDS ARGS...: one mqtt-to-kafka run.
probe_m2k() {
	local scen=$1 sys=$2 suffix=$3 bound=$4
	shift 4
	local csv="$WORK/$scen-$sys.csv" rc=0
	log "$scen $sys: probe mqtt-to-kafka $*"
	timeout --signal=INT --kill-after=10 "$bound" "$BIN/probe" mqtt-to-kafka --mqtt "$(url_of "$sys")" --kafka "$KAFKA" \
		--topic "/bench/$RUN/$suffix" --kafka-topic "_bench_${RUN}_${suffix//\//_}" --csv "$csv" "$@" \
		>"$OUT/logs/$scen-$sys.txt" 2>&1 || rc=$?
	[ "$rc" = 0 ] || [ "$rc" = 3 ] || log "$scen $sys: probe exit $rc (see logs/$scen-$sys.txt)"
	append_csv "$scen" "$sys" "$csv"
}

# perftest BOUND ARGS...: kafka-producer-perf-test with the harness's jars, bounded in time.
perftest() {
	local bound=$1
	shift
	timeout "$bound" scripts/kafka.sh tool org.apache.kafka.tools.ProducerPerformance --bootstrap-server "$KAFKA" "$@"
}

# ----------------------------------------------------------------- reference test 1
if budget_left 60; then
	probe_m2k ref1 ferry ref1 $((120 + BENCH_REF1_COUNT / 1000)) --count "$BENCH_REF1_COUNT" --qos 1 \
		--payload-size 12 --clients 1 --warmup 1000 --timeout 10s
else skip ref1; fi

# ----------------------------------------------------------------- reference test 2
# 12-byte lines, all distinct (the join check compares payloads).
for i in $(seq 1000); do printf '%012d\n' "$i"; done >"$WORK/data.txt"
REF2_BOUND=$((60 + BENCH_REF2_COUNT / 1000 * 2))
if budget_left $((20 + BENCH_REF2_COUNT / 1000)); then
	log "ref2-perftest: kafka-producer-perf-test $BENCH_REF2_COUNT records at 1000/s -> Ferry -> MQTT"
	rm -f "$WORK/recv.ready"
	timeout --signal=INT "$REF2_BOUND" "$BIN/benchkit" recv --mqtt "$(url_of ferry)" --topic "/bench/$RUN/rev/pp" \
		--kafka "$KAFKA" --kafka-topic "$REV_PP" --count "$BENCH_REF2_COUNT" --rate 1000 --qos 1 \
		--ready-file "$WORK/recv.ready" --timeout 15s --csv "$WORK/ref2-perftest.csv" \
		>"$OUT/logs/ref2-perftest-recv.txt" 2>&1 &
	RECV_PID=$!
	PIDS+=("$RECV_PID")
	for _ in $(seq 150); do [ -e "$WORK/recv.ready" ] && break; sleep 0.1; done
	# linger.ms=0: the reference's producer era default (Kafka 4 defaults to 5 ms, which would
	# be counted as bridge latency since the record timestamp is taken at send()).
	perftest "$REF2_BOUND" --topic "$REV_PP" --num-records "$BENCH_REF2_COUNT" --throughput 1000 \
		--payload-file "$WORK/data.txt" --command-property acks=all linger.ms=0 >"$OUT/logs/ref2-perftest-producer.txt" 2>&1 ||
		log "ref2-perftest: producer failed (logs/ref2-perftest-producer.txt)"
	wait "$RECV_PID" || log "ref2-perftest: recv exit $? (logs/ref2-perftest-recv.txt)"
	append_csv ref2-perftest ferry "$WORK/ref2-perftest.csv"
else skip ref2-perftest; fi

if budget_left $((10 + BENCH_REF2_COUNT / 1000)); then
	csv="$WORK/ref2-probe.csv"
	log "ref2-probe: probe kafka-to-mqtt $BENCH_REF2_COUNT at 1000/s"
	rc=0
	timeout --signal=INT --kill-after=10 "$REF2_BOUND" "$BIN/probe" kafka-to-mqtt --mqtt "$(url_of ferry)" --kafka "$KAFKA" \
		--topic "/bench/$RUN/rev/probe" --kafka-topic "$REV_PROBE" --count "$BENCH_REF2_COUNT" --rate 1000 \
		--qos 1 --payload-size 12 --warmup 100 --csv "$csv" >"$OUT/logs/ref2-probe.txt" 2>&1 || rc=$?
	[ "$rc" = 0 ] || [ "$rc" = 3 ] || log "ref2-probe: probe exit $rc"
	append_csv ref2-probe ferry "$csv"
else skip ref2-probe; fi

# ----------------------------------------------------------------- raw Kafka ceiling
for p in "${PAYLOADS[@]}"; do
	if ! budget_left 30; then skip "raw-${p}B"; continue; fi
	log "raw-${p}B: kafka-producer-perf-test $BENCH_RAW_COUNT records of $p B, acks=all, unthrottled"
	perftest 300 --topic "_bench_${RUN}_raw_$p" --num-records "$BENCH_RAW_COUNT" --throughput -1 \
		--record-size "$p" --command-property acks=all >"$OUT/logs/raw-${p}B.txt" 2>&1 || log "raw-${p}B: perf test failed"
	"$BIN/benchkit" perfcsv --payload-bytes "$p" --rate -1 <"$OUT/logs/raw-${p}B.txt" >"$WORK/raw-$p.csv" ||
		log "raw-${p}B: no summary"
	append_csv "raw-${p}B" kafka "$WORK/raw-$p.csv"
done

# ----------------------------------------------------------------- throughput matrix
# open:   publishers pipeline (probe --rate far above capacity: nobody waits for a PUBACK before
#         the next publish, up to 16384 in flight per publisher): the maximum sustained rate.
# closed: each publisher waits for its PUBACK (QoS 1) before the next publish, like the
#         reference's Paho loop. Ferry acknowledges only after Kafka did, Mosquitto at once.
for loop in $BENCH_TPUT_LOOPS; do
	for p in "${PAYLOADS[@]}"; do for q in "${QOSES[@]}"; do for c in "${CLIENTS[@]}"; do
		[ "$loop" = closed ] && [ "$q" = 0 ] && continue # QoS 0 has no acknowledgement to wait for
		for sys in ferry forwarder; do
			scen="throughput-$loop-${p}B-qos${q}-c${c}"
			if ! budget_left 20; then skip "$scen/$sys"; continue; fi
			rateflag=()
			[ "$loop" = open ] && rateflag=(--rate "$BENCH_SATURATE_RATE")
			probe_m2k "$scen" "$sys" "tp/$sys/$loop/$p/$q/$c" $((60 + BENCH_TPUT_COUNT / 500)) --count "$BENCH_TPUT_COUNT" \
				--qos "$q" --payload-size "$p" --clients "$c" --warmup $((BENCH_TPUT_COUNT / 10)) --timeout 5s "${rateflag[@]}"
		done
	done; done; done
done

# ----------------------------------------------------------------- latency at fixed rates
for r in "${RATES[@]}"; do
	n=$((r * BENCH_LAT_SECONDS))
	c=$((r >= 10000 ? 10 : 1))
	for sys in ferry forwarder; do
		if ! budget_left $((BENCH_LAT_SECONDS + 15)); then skip "latency-$r/$sys"; continue; fi
		probe_m2k "latency-$r" "$sys" "lat/$sys/$r" $((60 + BENCH_LAT_SECONDS * 3)) --count "$n" --rate "$r" \
			--qos 1 --payload-size 12 --clients "$c" --warmup $((r / 2)) --timeout 5s
	done
done

# ----------------------------------------------------------------- profile
if [ "$PROFILE" = 1 ] && budget_left $((BENCH_PROFILE_SECONDS + 20)); then
	log "profile: Ferry CPU and allocations for ${BENCH_PROFILE_SECONDS}s under 12 B QoS1, 10 pipelining publishers"
	curl -fsS -o "$OUT/ferry-cpu.pprof" \
		"http://127.0.0.1:$FERRY_HTTP_PORT/debug/pprof/profile?seconds=$BENCH_PROFILE_SECONDS" &
	CPU_PID=$!
	curl -fsS -o "$OUT/ferry-allocs.pprof" \
		"http://127.0.0.1:$FERRY_HTTP_PORT/debug/pprof/allocs?seconds=$BENCH_PROFILE_SECONDS" &
	ALLOC_PID=$!
	# Enough load to outlast the profile window; the probe is stopped when the window closes.
	timeout --signal=INT $((BENCH_PROFILE_SECONDS + 3)) "$BIN/probe" mqtt-to-kafka --mqtt "$(url_of ferry)" \
		--kafka "$KAFKA" --topic "/bench/$RUN/profile" --kafka-topic "_bench_${RUN}_profile" \
		--count $((BENCH_PROFILE_SECONDS * 100000)) --rate "$BENCH_SATURATE_RATE" --qos 1 --payload-size 12 \
		--clients 10 --timeout 2s \
		>"$OUT/logs/profile-load.txt" 2>&1 || true
	wait "$CPU_PID" "$ALLOC_PID" || log "profile: capture failed"
	if [ -s "$OUT/ferry-cpu.pprof" ]; then
		go tool pprof -top -nodecount=40 "$BIN/bridge" "$OUT/ferry-cpu.pprof" >"$OUT/ferry-cpu-top.txt" 2>&1 || true
		go tool pprof -top -cum -nodecount=40 "$BIN/bridge" "$OUT/ferry-cpu.pprof" >"$OUT/ferry-cpu-cum.txt" 2>&1 || true
		go tool pprof -top -sample_index=alloc_space -nodecount=30 "$BIN/bridge" "$OUT/ferry-allocs.pprof" \
			>"$OUT/ferry-allocs-top.txt" 2>&1 || true
		cp "$BIN/bridge" "$OUT/bridge.bin" # for later `go tool pprof`
	fi
elif [ "$PROFILE" = 1 ]; then skip profile; fi

# ----------------------------------------------------------------- summary
{
	echo "uptime at end:   $(uptime)"
	echo "elapsed: $((SECONDS - START_S)) s"
	[ ${#SKIPPED[@]} = 0 ] || echo "skipped (time budget): ${SKIPPED[*]}"
	echo "ferry: $(grep -c . "$OUT/logs/ferry.log" || true) log lines; forwarder: $(tail -n 1 "$OUT/logs/forwarder.log")"
} >>"$OUT/env.txt"
[ -s "$RESULTS" ] || die "no results"
"$BIN/benchkit" summary --csv "$RESULTS" --env "$OUT/env.txt" --title "Ferry benchmark ($MODE)" >"$OUT/summary.md"
if [ -s "$OUT/ferry-cpu-top.txt" ]; then
	{
		echo
		echo "## Ferry CPU profile (top 25 flat, ${BENCH_PROFILE_SECONDS}s under 12 B QoS1, 10 pipelining publishers)"
		echo
		echo '```'
		sed -n '1,31p' "$OUT/ferry-cpu-top.txt"
		echo '```'
	} >>"$OUT/summary.md"
fi
log "done in $((SECONDS - START_S)) s: $OUT/summary.md"
cat "$OUT/summary.md"
