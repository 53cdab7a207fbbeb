# measure.sh - helpers the benchmark scripts share (sourced by scripts/ab.sh and
# scripts/peer-bench.sh): the probe's CSV, a bridge's batch histogram, CPU from /proc.

load1() { cut -d' ' -f1 /proc/loadavg; }

# field CSV METRIC COLUMN: one column of the probe's CSV row for METRIC.
field() {
	awk -F, -v m="$2" -v c="$3" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) col = i; next }
		$2 == m { print $col; exit }' "$1"
}

# batch_stats HTTP_PORT: "sum count" of a Ferry bridge's ferry_kafka_batch_records histogram.
batch_stats() {
	curl -fsS "http://127.0.0.1:$1/metrics" | awk '
		/^ferry_kafka_batch_records_sum / { s = $2 } /^ferry_kafka_batch_records_count / { c = $2 }
		END { printf "%.0f %.0f\n", s, c }'
}

# cpu_ticks PID...: user+system CPU clock ticks of those processes so far (threads included).
cpu_ticks() {
	local t=0 p f
	for p in "$@"; do
		f=$(cut -d')' -f2 "/proc/$p/stat" 2>/dev/null) || continue
		t=$((t + $(echo "$f" | awk '{ print $12 + $13 }')))
	done
	echo "$t"
}
TICK=$(getconf CLK_TCK)

# kafka_pids: the pids of the Kafka JVMs on this machine (empty when Kafka runs elsewhere).
kafka_pids() { pgrep -f 'kafka\.Kafka' | tr '\n' ' ' || true; }

# us_per_msg TICKS MSGS: CPU microseconds per message.
us_per_msg() { awk -v t="$1" -v n="$2" -v tick="$TICK" 'BEGIN { printf "%.2f", (n ? t / tick * 1e6 / n : 0) }'; }
