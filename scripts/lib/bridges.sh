# bridges.sh - sourced by the scripts that run bridge binaries beside a Kafka (roundtrip.sh,
# fanout.sh): uses FERRY_TEST_KAFKA, else starts scripts/kafka.sh's Kafka (and stops it at the end
# when it was not running); builds cmd/bridge and cmd/probe into $bin; kills every pid appended to
# pids at exit. Defines free_port. Run from the repository's root.
started_kafka=0
if [[ -z "${FERRY_TEST_KAFKA:-}" ]]; then
	scripts/kafka.sh status >/dev/null || started_kafka=1
	FERRY_TEST_KAFKA=$(scripts/kafka.sh up | tail -n 1)
fi
bin=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]:-}"; do [[ -z "$p" ]] || kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$bin"
	((started_kafka == 0)) || scripts/kafka.sh down >/dev/null || true
}
trap cleanup EXIT
go build -o "$bin/bridge" ./cmd/bridge
go build -o "$bin/probe" ./cmd/probe
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
