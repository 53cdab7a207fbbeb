#!/usr/bin/env bash
# test.sh - Ferry's one test command (README, `make test` and .ci/run call it).
#
# Installs what is missing (Debian packages incl. haproxy, paho-mqtt for Python, Go modules, Kafka jars),
# starts Kafka via scripts/kafka.sh unless one is already running, then runs
#   gofmt -l (must list nothing), go vet, go test -race
# and stops the Kafka it started. Exits non-zero on any failure.
#
#   scripts/test.sh                      # everything
#   scripts/test.sh ./internal/...       # some packages
#   scripts/test.sh -run TestX ./bridge/ # extra `go test` arguments are passed through
#
# FERRY_TEST_KAFKA, when already set, names an external Kafka to use instead.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

now_ms() { date +%s%3N; }
secs_since() { local d=$(($(now_ms) - $1)); printf '%d.%ds' $((d / 1000)) $((d % 1000 / 100)); }
say() { printf '==> %s\n' "$*" >&2; }

T_START=$(now_ms)
TIMINGS=()
phase_start() { PHASE=$1; PHASE_T0=$(now_ms); say "$PHASE"; }
phase_end() { TIMINGS+=("$PHASE=$(secs_since "$PHASE_T0")"); }

FAILED=()
KAFKA_STARTED=0
KAFKA_EXTERNAL=0

summary() {
	local rc=$?
	[[ -z "${beside_pid:-}" ]] || kill "$beside_pid" 2>/dev/null || true
	[[ -z "${build_pid:-}" ]] || kill "$build_pid" 2>/dev/null || true
	[[ -z "${bin_pid:-}" ]] || kill "$bin_pid" 2>/dev/null || true
	[[ -z "${bin_dir:-}" ]] || rm -rf "$bin_dir"
	[[ -z "${build_dir:-}" ]] || rm -rf "$build_dir"
	for p in "${shard_pids[@]:-}" "${probe_pid:-}"; do [[ -z "$p" ]] || kill "$p" 2>/dev/null || true; done
	if ((KAFKA_STARTED)); then
		scripts/kafka.sh down || true
	fi
	say "timings: $(printf '%s ' "${TIMINGS[@]}")total=$(secs_since "$T_START")"
	if ((rc == 0 && ${#FAILED[@]} == 0)); then
		say "PASS"
	else
		say "FAIL: ${FAILED[*]:-exit $rc}"
	fi
}
trap summary EXIT
trap 'exit 130' INT TERM HUP

# ---------------------------------------------------------------- install what is missing

phase_start install
need_pkgs=()
command -v mosquitto_pub >/dev/null || need_pkgs+=(mosquitto-clients)
command -v mosquitto >/dev/null || [[ -x /usr/sbin/mosquitto ]] || need_pkgs+=(mosquitto)
command -v kcat >/dev/null || need_pkgs+=(kcat)
command -v haproxy >/dev/null || [[ -x /usr/sbin/haproxy ]] || need_pkgs+=(haproxy)
command -v java >/dev/null || need_pkgs+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || need_pkgs+=(maven)
command -v python3 >/dev/null || need_pkgs+=(python3 python3-pip)
if ((${#need_pkgs[@]})); then
	say "apt-get install ${need_pkgs[*]}"
	SUDO=()
	[[ $(id -u) -eq 0 ]] || SUDO=(sudo)
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		"${need_pkgs[@]}" >/dev/null
fi
if ! python3 -c 'import paho.mqtt.client' 2>/dev/null; then
	say "pip install paho-mqtt"
	python3 -m pip install -q paho-mqtt 2>/dev/null ||
		python3 -m pip install -q --break-system-packages paho-mqtt
fi
phase_end

phase_start "go-mod-download"
go mod download
phase_end

# ---------------------------------------------------------------- vet and build beside Kafka's start

# Package patterns among the arguments select what gofmt, vet and the build check; default
# everything.
pkgs=()
for a in "$@"; do
	case "$a" in
	./* | ../* | github.com/*) pkgs+=("$a") ;;
	esac
done
((${#pkgs[@]})) || pkgs=(./...)

# The full run (no package or only ./... among the arguments) splits the bridge package into
# shards, below; test_args are what `go test` gets.
test_args=("$@")
if [[ "${pkgs[*]}" == ./... && " $* " != *" ./... "* ]]; then
	test_args+=(./...)
fi
full=0
if [[ "${test_args[-1]}" == ./... && ${#pkgs[@]} == 1 ]]; then
	full=1
fi

# What compiles while Kafka downloads and starts. A full run builds there only what its first
# tests need, the race-instrumented bridge test binary and the plain cmd/bridge, and compiles
# the other packages' test binaries and runs go vet beside the bridge tests (they mostly
# wait, one core is spare): with cold caches that moves ~60 s of compiling off the critical
# path. Any other run builds every selected test binary and vets it here.
# vet runs with -race, so it reuses the race build's compiled packages: 12-15 s instead of
# 80 s with cold caches (it then checks the race build's files: bridge/race_test.go, not
# bridge/norace_test.go, one constant).
build_dir=$(mktemp -d)
# The plain (not race) build of cmd/bridge, beside the race build: the bridge tests that
# run cmd/bridge as a child process take it from FERRY_TEST_BRIDGE_BIN (one build for every
# test process, instead of one each, at once), and the README runs' `go run` find the same
# build in the cache.
bin_dir=$(mktemp -d)
export FERRY_TEST_BRIDGE_BIN="$bin_dir/ferry-bridge"
# A full run does not wait for it: the bridge tests start once their own binary is built, the
# ones that come first need no child process, and the first that does waits for this build
# (FERRY_TEST_BRIDGE_BIN_WAIT; the binary appears whole, or a ".failed" file with the
# build's output).
(
	t0=$(now_ms)
	# bin_build [nice ...]: the build, run under the given command if any.
	bin_build() { "$@" go build -o "$FERRY_TEST_BRIDGE_BIN.tmp" ./cmd/bridge >"$build_dir/bin.log" 2>&1; }
	ok=0
	if ((full)); then
		# Below the race build's priority while it goes on (the first tests wait for that
		# one), then at the tests' own: a test that runs cmd/bridge as a child process waits
		# for this one. A build stopped halfway keeps the packages it finished in the build
		# cache.
		# In its own process group (set -m), so that stopping it stops its compilers too; not
		# in its own session (setsid): with the kernel's autogroup scheduling a session gets
		# its share of the CPU whatever its nice value, and the race build took 141-144 s
		# instead of 104-107 s with cold caches.
		set -m
		bin_build nice -n 10 &
		niced=$!
		set +m
		while kill -0 "$niced" 2>/dev/null && [[ ! -e "$build_dir/bridge-build.done" ]]; do sleep 0.5; done
		if [[ -e "$build_dir/bridge-build.done" ]] && kill -0 "$niced" 2>/dev/null; then
			kill -- "-$niced" 2>/dev/null || true
			wait "$niced" 2>/dev/null || true
			bin_build && ok=1
		else
			wait "$niced" && ok=1
		fi
	else
		bin_build && ok=1
	fi
	if ((ok)); then
		mv "$FERRY_TEST_BRIDGE_BIN.tmp" "$FERRY_TEST_BRIDGE_BIN"
	else
		cp "$build_dir/bin.log" "$FERRY_TEST_BRIDGE_BIN.failed"
	fi
	echo "$(secs_since "$t0")" >"$build_dir/bin.done"
) &
bin_pid=$!
# vet_and_build builds the test binaries of the given packages without running a test
# (-run '^$': the build cache then holds what `go test` needs), and cmd/probe's plain build,
# then runs go vet -race over every selected package; its result goes to vet.rc.
vet_and_build() {
	local t0 rc=0
	t0=$(now_ms)
	go build -o /dev/null ./cmd/probe >>"$build_dir/bin.log" 2>&1 || true
	go test -race -count=1 -run '^$' "$@" >"$build_dir/build.log" 2>&1 || true
	echo "$(secs_since "$t0")" >"$build_dir/build.done"
	t0=$(now_ms)
	go vet -race "${pkgs[@]}" >"$build_dir/vet.log" 2>&1 || rc=$?
	echo "$rc $(secs_since "$t0")" >"$build_dir/vet.rc"
}
if ((full)); then
	(
		t0=$(now_ms)
		go test -race -count=1 -run '^$' ./bridge/ >"$build_dir/bridge-build.log" 2>&1 || true
		echo "$(secs_since "$t0")" >"$build_dir/bridge-build.done"
	) &
else
	vet_and_build "${pkgs[@]}" &
fi
build_pid=$!

# ---------------------------------------------------------------- Kafka

if [[ -n "${FERRY_TEST_KAFKA:-}" ]]; then
	say "using external Kafka FERRY_TEST_KAFKA=$FERRY_TEST_KAFKA"
	KAFKA_EXTERNAL=1
else
	phase_start kafka-download
	scripts/kafka.sh fetch
	phase_end

	phase_start kafka-start
	if scripts/kafka.sh status >/dev/null; then
		say "Kafka already running: reusing it and leaving it running"
	else
		KAFKA_STARTED=1
	fi
	FERRY_TEST_KAFKA=$(scripts/kafka.sh up | tail -n 1)
	export FERRY_TEST_KAFKA
	say "FERRY_TEST_KAFKA=$FERRY_TEST_KAFKA"
	phase_end
fi

# ---------------------------------------------------------------- checks and tests

fmt_dirs=(.)
if [[ "${pkgs[*]}" != ./... ]]; then
	fmt_dirs=()
	for p in "${pkgs[@]}"; do
		d=${p%/...}
		d=${d#github.com/ferry-bridge/ferry}
		d=${d#/}
		fmt_dirs+=("${d:-.}")
	done
fi

phase_start gofmt
unformatted=$(gofmt -l "${fmt_dirs[@]}" | grep -v '^\.cache/' || true)
if [[ -n "$unformatted" ]]; then
	printf 'gofmt: these files need formatting (run gofmt -w):\n%s\n' "$unformatted" >&2
	FAILED+=(gofmt)
fi
phase_end

# vet_result reads what vet_and_build left: go vet's result and the build's times.
vet_result() {
	local vet_rc vet_took
	read -r vet_rc vet_took <"$build_dir/vet.rc"
	cat "$build_dir/vet.log" >&2
	((vet_rc == 0)) || FAILED+=("go vet")
	TIMINGS+=("vet=$vet_took" "test-build=$(<"$build_dir/build.done")")
}

# bin_result reports the plain build of cmd/bridge once it is done.
bin_result() {
	wait "$bin_pid" 2>/dev/null || true
	bin_pid=
	if [[ ! -x "$FERRY_TEST_BRIDGE_BIN" ]]; then
		cat "$build_dir/bin.log" >&2
	fi
	TIMINGS+=("bin-build=$(<"$build_dir/bin.done")")
}

phase_start "build"
# Started beside Kafka (above): this phase is the wait for it, then for the builds.
wait "$build_pid" || true
build_pid=
if ((full)); then
	TIMINGS+=("bridge-test-build=$(<"$build_dir/bridge-build.done")")
	export FERRY_TEST_BRIDGE_BIN_WAIT=15m
else
	bin_result
	vet_result
fi
phase_end

phase_start "go-test"
# -p 1: one package's tests at a time. The machine has 2 cores shared by Kafka,
# the bridges under test and their load generators; latency assertions (the
# probe's injected-delay test, the ring's wake-up test) need them quiet.
# On a full run:
#   - the light packages (no Kafka of their own, little CPU: their tests
#     together take under a minute) run beside the others;
#   - the bridge package (most of the run; its tests mostly wait on Kafka,
#     on processes they start and on timers) runs as FERRY_TEST_SHARDS
#     processes at once (default 3), its tests dealt to them by their
#     seconds (bridge_weights);
#   - cmd/probe starts as soon as the first of them ends (its README runs
#     load the machine as a shard does);
#   - then probe and ringbuffer, alone: they measure latencies.
# (A new package is light until it is named in heavy.)
heavy=(./bridge/ ./cmd/probe/ ./probe/ ./ringbuffer/)
n_shards=${FERRY_TEST_SHARDS:-3}
if ! [[ "$n_shards" =~ ^[1-9]$ ]]; then
	echo "test.sh: FERRY_TEST_SHARDS=$n_shards: want a number of bridge test processes from 1 to 9" >&2
	exit 2
fi
# The bridge tests that take longest here, with their seconds (a warm run's -v timings,
# 2026-12-03), heaviest first; any other test counts 1 s (their mean). A full run deals them
# to the shards heaviest first, each to the shard with the least seconds so far. (Where a test
# goes does not change when it runs: a shard runs its tests in source order. The ones that run
# cmd/bridge as a child process wait for its plain build, FERRY_TEST_BRIDGE_BIN_WAIT.)
bridge_weights=(TestScaleOutHAProxy:33 TestSoak:29 TestThreeBrokersKillOne:28 TestKafkaKilledMidStream:24
	TestResumeWithoutSessionExpiry:20 TestV5ReceiveMaximumFreedWhenPubackSent:18
	TestBridgeKill9LosesNothingAcked:15 TestSlowClaimWaitsForConnectTimeout:15
	TestKafkaUnreachableAtStart:13 TestSessionsSoakKill9:12 TestBadInputGarbage:11
	TestHorizonAfterRestart:10 TestSlowSubscriberReverse:10 TestResumeUnderOwnACL:10
	TestWillOfKilledInstance:10 TestExpiredSessionOfClosedInstanceDeleted:9
	TestInstanceRestartAfterKill9NotDuplicate:9 TestResumeWithEverySubscriptionDenied:8
	TestDuplicateInstanceID:8 TestAcksOrderedWithMochiWrites:8 TestWillOfKilledInstanceKill9:8
	TestRingFullKafkaPaused:8 TestQoS1ManyClientsInOrder:7 TestSessionEndsAfterMaxExpiry:6
	TestMaxSessionExpiryCapsExpiry:6 TestReverseStartNoRaceWithFirstRecord:6
	TestResumeReadsReverseTopicsFromHorizon:6 TestIdleConnectionMemory:5
	TestReplayReadsTransactionalTopic:5 TestConformanceMessageExpiryQoS1:5
	TestKafkaUnreachableSaysWhy:5 TestReverseNewTopicsFromFirstRecord:5
	TestReverseSessionSurvivesRestart:5 TestConnectionStorm:5 TestRetainedWithoutCreationTimeStays:5
	TestRetainedPubackWaitsForRetainedRecord:5)
beside_pid=
go_test_failed=0
if ((full)); then
	extra=("${test_args[@]:0:${#test_args[@]}-1}")
	mapfile -t light < <(go list ./... | grep -v -x -F -f <(go list "${heavy[@]}"))
	mapfile -t not_bridge < <(go list ./... | grep -v -x -F -f <(go list ./bridge/))
	beside_log=$(mktemp)
	# Beside the bridge shards (started below, once it has listed their tests): the other
	# packages' test builds and go vet, then the light packages' tests.
	(
		vet_and_build "${not_bridge[@]}"
		go test -race -count=1 -p 1 -timeout 40m "${extra[@]}" "${light[@]}"
	) >"$beside_log" 2>&1 &
	beside_pid=$!
	mapfile -t listed < <(go test -race -list '.' ./bridge/ | grep -E '^(Test|Fuzz|Example)')
	declare -A weight=()
	names=()
	for w in "${bridge_weights[@]}"; do
		weight[${w%%:*}]=${w##*:}
		printf '%s\n' "${listed[@]}" | grep -qx -- "${w%%:*}" && names+=("${w%%:*}")
	done
	mapfile -t rest < <(printf '%s\n' "${listed[@]}" | grep -v -x -F -f <(printf '%s\n' "${names[@]}"))
	names+=("${rest[@]}")
	shards=()
	loads=()
	for ((k = 0; k < n_shards; k++)); do
		shards[k]=""
		loads[k]=0
	done
	for n in "${names[@]}"; do
		k=0
		for j in "${!loads[@]}"; do ((loads[j] >= loads[k])) || k=$j; done
		shards[k]+="${shards[k]:+|}$n"
		loads[k]=$((loads[k] + ${weight[$n]:-1}))
	done
	say "bridge: ${#names[@]} tests in $n_shards shards of about $(printf '%ss ' "${loads[@]}")(their -v seconds)"
	shard_logs=()
	shard_pids=()
	for k in "${!shards[@]}"; do
		shard_logs[k]=$(mktemp)
		go test -race -count=1 -timeout 40m "${extra[@]}" -run "^(${shards[k]})\$" ./bridge/ >"${shard_logs[k]}" 2>&1 &
		shard_pids[k]=$!
	done
	first_rc=0
	wait -n -p first_done "${shard_pids[@]}" || first_rc=$?
	probe_log=$(mktemp)
	go test -race -count=1 -timeout 40m "${extra[@]}" ./cmd/probe/ >"$probe_log" 2>&1 &
	probe_pid=$!
	for k in "${!shards[@]}"; do
		if [[ "${shard_pids[k]}" == "$first_done" ]]; then
			((first_rc == 0)) || go_test_failed=1
		else
			wait "${shard_pids[k]}" || go_test_failed=1
		fi
		say "bridge, shard $((k + 1)) of $n_shards:"
		cat "${shard_logs[k]}"
		rm -f "${shard_logs[k]}"
	done
	wait "$probe_pid" || go_test_failed=1
	say "cmd/probe (from the end of the first bridge shard):"
	cat "$probe_log"
	rm -f "$probe_log"
	test_args=("${extra[@]}" "${heavy[@]:2}")
fi
go test -race -count=1 -p 1 -timeout 40m "${test_args[@]}" || go_test_failed=1
if [[ -n "$beside_pid" ]]; then
	wait "$beside_pid" || go_test_failed=1
	say "light packages (run beside the others):"
	cat "$beside_log"
	rm -f "$beside_log"
	vet_result
fi
[[ -z "$bin_pid" ]] || bin_result
rm -rf "$build_dir"
if ((go_test_failed)); then
	FAILED+=("go test")
	if ((KAFKA_EXTERNAL == 0)) && log=$(scripts/kafka.sh log) && [[ -f "$log" ]]; then
		say "Kafka broker log: $log; its last WARN/ERROR lines:"
		grep -E '^[0-9T:.-]+ \[[^]]*\] (WARN|ERROR)' "$log" | tail -n 20 | cut -c1-400 >&2 || true
		say "and its last 15 lines:"
		tail -n 15 "$log" | cut -c1-400 >&2
	fi
fi
phase_end

((${#FAILED[@]} == 0))
