#!/usr/bin/env bash
# benchstat.sh - Ferry's Go micro-benchmarks, run with -count and summarised with benchstat.
#
# Usage:
#   scripts/benchstat.sh [--count N] [--benchtime T] [--out DIR] [--base FILE] [--no-produce]
#   scripts/benchstat.sh --ring   only the ring contract: exactly
#       go test -run '^$' -bench 'Benchmark(Ring|Channel)/producers=4$' -count 4 ./ringbuffer/
#       and the ratios ring/channel of the median items/s and cpu-ns/item (target >= 1.5x items/s and
#       less CPU per item), with the load average: run it on a quiet machine.
#
#   --count N      runs per benchmark (default 6: benchstat's minimum for a 95% interval)
#   --benchtime T  -benchtime of the in-memory benchmarks (default 500ms)
#   --out DIR      where new.txt and benchstat.txt go (default bench-results/go-<timestamp>/)
#   --base FILE    an earlier new.txt: benchstat compares it with this run (A/B)
#   --no-produce   skip bridge BenchmarkProduce (it needs a bridge and Kafka)
#
# Benchmarks: ringbuffer (BenchmarkRing vs BenchmarkChannel), topicmap (BenchmarkMatch vs
# BenchmarkLinear, BenchmarkForward), probe/... (BenchmarkStreamObserve and any stamp/parse
# benchmarks) and bridge BenchmarkProduce (the whole MQTT -> Kafka produce path; real Kafka
# from FERRY_TEST_KAFKA, else the broker of scripts/kafka.sh if it runs, else the embedded
# kfake - the benchmark name says which). The target ratios of docs/targets.md (ring vs
# channel with 4 producers >= 1.5x, 10,000-rule matching vs linear >= 50x) are printed by
# benchstat with the benchmarks as columns.
#
# benchstat is run with `go run golang.org/x/perf/cmd/benchstat@latest` (not in go.mod).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

COUNT=6
BENCHTIME=500ms
OUT=""
BASE=""
PRODUCE=1
RING=0
while [ $# -gt 0 ]; do
	case "$1" in
	--count) COUNT="$2"; shift ;;
	--benchtime) BENCHTIME="$2"; shift ;;
	--out) OUT="$2"; shift ;;
	--base) BASE="$2"; shift ;;
	--no-produce) PRODUCE=0 ;;
	--ring) RING=1 ;;
	-h | --help) sed -n '2,22p' "$0"; exit 0 ;;
	*) echo "benchstat.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
OUT="${OUT:-$ROOT/bench-results/go-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"

if [ "$RING" = 1 ]; then
	echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/ring.txt"
	go test -run '^$' -bench 'Benchmark(Ring|Channel)/producers=4$' -count 4 ./ringbuffer/ | tee -a "$OUT/ring.txt"
	echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/ring.txt"
	# Median of each metric per benchmark, then ring/channel.
	awk '
		/^Benchmark(Ring|Channel)\/producers=4/ {
			name = ($1 ~ /^BenchmarkRing/) ? "ring" : "channel"
			for (i = 2; i < NF; i++) {
				if ($(i + 1) == "items/s") items[name] = items[name] " " $i
				if ($(i + 1) == "cpu-ns/item") cpu[name] = cpu[name] " " $i
			}
		}
		function median(list,    a, n, i, j, t) {
			n = split(list, a, " ")
			for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
			return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
		}
		END {
			ri = median(items["ring"]); ci = median(items["channel"]); rc = median(cpu["ring"]); cc = median(cpu["channel"])
			printf "median items/s: ring %.0f, channel %.0f: ring/channel %.2fx (target >= 1.5x)\n", ri, ci, ri / ci
			printf "median cpu-ns/item: ring %.1f, channel %.1f: ring/channel %.2fx (target < 1)\n", rc, cc, rc / cc
		}' "$OUT/ring.txt" | tee -a "$OUT/ring.txt"
	exit 0
fi
NEW="$OUT/new.txt"
BENCHSTAT=(go run golang.org/x/perf/cmd/benchstat@latest)
log() { printf 'benchstat.sh: %s\n' "$*" >&2; }

{
	echo "# $(date -Is) $(git rev-parse --short HEAD 2>/dev/null) load: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/env.txt"

log "in-memory benchmarks: -count $COUNT -benchtime $BENCHTIME"
go test -run '^$' -bench . -benchmem -count "$COUNT" -benchtime "$BENCHTIME" \
	./ringbuffer ./topicmap ./probe/... | tee "$NEW" | grep -E '^(Benchmark|ok|FAIL)' >&2

if [ "$PRODUCE" = 1 ]; then
	if [ -z "${FERRY_TEST_KAFKA:-}" ] && scripts/kafka.sh status >/dev/null 2>&1; then
		FERRY_TEST_KAFKA="$(scripts/kafka.sh addr)"
	fi
	log "bridge BenchmarkProduce (Kafka: ${FERRY_TEST_KAFKA:-embedded kfake})"
	FERRY_TEST_KAFKA="${FERRY_TEST_KAFKA:-}" go test -run '^$' -bench '^BenchmarkProduce$' -benchmem \
		-count "$COUNT" -benchtime 3000x ./bridge | tee -a "$NEW" | grep -E '^(Benchmark|ok|FAIL)' >&2
fi

{
	echo "## All benchmarks ($NEW)"
	"${BENCHSTAT[@]}" "$NEW"
	echo
	echo "## Ring vs buffered channel (target: Ring >= 1.5x items/s of Channel at producers=4, less CPU per item)"
	"${BENCHSTAT[@]}" -filter '.name:(Ring OR Channel)' -col .name -row /producers "$NEW"
	echo
	echo "## Route matching vs linear scan (target: Match >= 50x faster at rules=10000)"
	"${BENCHSTAT[@]}" -filter '.name:(Match OR Linear)' -col .name -row /rules "$NEW"
	if [ -n "$BASE" ]; then
		echo
		echo "## A/B: $BASE vs $NEW"
		"${BENCHSTAT[@]}" "$BASE" "$NEW"
	fi
} >"$OUT/benchstat.txt" 2>&1
cat "$OUT/benchstat.txt"
log "results in $OUT"
