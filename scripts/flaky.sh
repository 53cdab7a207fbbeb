#!/usr/bin/env bash
# flaky.sh - finds flaky tests before CI does: runs the suite N times and prints, per test,
# how often it failed.
#
#   scripts/flaky.sh N [go test args...]   N runs of `go test -race -count=1 -p 1` over the
#                                          given packages (default: ./bridge/ ./producer/
#                                          ./cmd/probe/ ./probe/ ./ringbuffer/) against the
#                                          Kafka of scripts/kafka.sh (started if needed)
#   scripts/flaky.sh --clone N             N runs of .ci/run, each on a fresh clone of HEAD
#                                          (what CI does: cold test cache, its own Kafka)
#
# Prints one line per test that failed at least once ("failed K of N"), each run's
# wall time, exit status and phase times, and exits non-zero when any run failed. Every
# run's log is kept under $FLAKY_DIR (default a temp dir, printed). Every run is bounded by the
# suite's own timeouts; N is capped at 50.
#
# When: before a change that touches timing, concurrency or a shared resource (ports,
# goroutines, metrics, Kafka topics) lands, and before a session ends:
# `scripts/flaky.sh --clone 3` (about 25 minutes here), or `scripts/flaky.sh 10 -run 'TestX|TestY'
# ./bridge/` to hammer a few tests.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

clone=0
if [[ "${1:-}" == --clone ]]; then
	clone=1
	shift
fi
n=${1:-}
if ! [[ "$n" =~ ^[0-9]+$ ]] || ((n < 1 || n > 50)); then
	echo "usage: scripts/flaky.sh [--clone] N [go test args...]   (1 <= N <= 50)" >&2
	exit 2
fi
shift
args=("$@")
if ((clone && ${#args[@]})); then
	echo "flaky.sh: --clone runs .ci/run as CI does; it takes no go test arguments" >&2
	exit 2
fi

dir=${FLAKY_DIR:-$(mktemp -d -t ferry-flaky.XXXXXX)}
mkdir -p "$dir"
echo "flaky.sh: logs in $dir" >&2

started=0
if ((!clone)); then
	if [[ -z "${FERRY_TEST_KAFKA:-}" ]]; then
		scripts/kafka.sh status >/dev/null || started=1
		FERRY_TEST_KAFKA=$(scripts/kafka.sh up | tail -n1)
	fi
	export FERRY_TEST_KAFKA
	has_pkg=0
	for a in "${args[@]}"; do
		case "$a" in ./* | github.com/*) has_pkg=1 ;; esac
	done
	((has_pkg)) || args+=(./bridge/ ./producer/ ./cmd/probe/ ./probe/ ./ringbuffer/)
fi
trap 'if ((started)); then scripts/kafka.sh down >/dev/null 2>&1 || true; fi' EXIT

declare -A fails=()
failed_runs=0
for i in $(seq 1 "$n"); do
	log="$dir/run-$i.log"
	t0=$(date +%s)
	rc=0
	if ((clone)); then
		work=$(mktemp -d -t ferry-flaky-clone.XXXXXX)
		git clone -q "$ROOT" "$work/ferry"
		(cd "$work/ferry" && .ci/run) >"$log" 2>&1 || rc=$?
		rm -rf "$work"
	else
		go test -race -count=1 -p 1 -timeout 40m "${args[@]}" >"$log" 2>&1 || rc=$?
	fi
	secs=$(($(date +%s) - t0))
	while read -r name; do
		fails[$name]=$((${fails[$name]:-0} + 1))
	done < <(grep -oE -- '--- FAIL: [^ ]+' "$log" | awk '{print $3}' | sort -u)
	# The suite's own phase times (scripts/test.sh prints them last): where a slow run went.
	timings=$(grep -oE 'timings: .*' "$log" | tail -n 1 || true)
	if ((rc == 0)); then
		echo "run $i/$n: pass in ${secs}s${timings:+ ($timings)}" >&2
	else
		failed_runs=$((failed_runs + 1))
		echo "run $i/$n: FAIL (exit $rc) in ${secs}s: $log${timings:+ ($timings)}" >&2
	fi
done

echo "flaky.sh: $failed_runs of $n runs failed"
for name in "${!fails[@]}"; do
	printf '%s failed %d of %d\n' "$name" "${fails[$name]}" "$n"
done | sort
((failed_runs == 0))
