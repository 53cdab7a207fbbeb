#!/usr/bin/env bash
# soak.sh - the long, full-size reliability runs of issue 9 (CI runs shortened versions).
#
#   scripts/soak.sh            all of the below, one after the other
#   scripts/soak.sh soak       TestSoak for 10 minutes at 5,000 msg/s each way
#                              (FERRY_SOAK_DURATION, FERRY_SOAK_RATE override)
#   scripts/soak.sh storm      TestConnectionStorm without -race: 10,000 clients (needs
#                              ulimit -n >= 21024; reduced to what the limit allows otherwise)
#   scripts/soak.sh garbage    TestBadInputGarbage for 30 s, TestSlowSubscriberReverse with
#                              200,000 records (FERRY_SOAK_FULL=1)
#   scripts/soak.sh cluster    TestThreeBrokersKillOne (starts 3 Kafka nodes of its own)
#   scripts/soak.sh hung       TestThreeBrokersHungBroker (3 Kafka nodes of its own, one paused):
#                              healthy partitions' PUBACK p50/p99 before and while a broker hangs
#   scripts/soak.sh scaleout   TestScaleOutHAProxy full size (FERRY_SOAK_FULL=1): 3 Ferry
#                              processes behind HAProxy, 300 publishers x 20,000 QoS 1 msgs, one
#                              instance killed with SIGKILL; 100,000 reverse records; prints acked,
#                              in Kafka, lost, duplicated and the reconnect time
#   scripts/soak.sh sessions   TestSessionsSoakKill9 full size (FERRY_SOAK_FULL=1), both modes one
#                              after the other: 3 Ferry processes behind HAProxy, 1,000 persistent
#                              sessions (a third MQTT 5) in 50 groups, 6 QoS 1 publishers x 5,000
#                              msgs, one instance killed with SIGKILL at a random moment
#                              (FERRY_SOAK_SEED repeats one). "reverse": every topic a reverse topic,
#                              every acknowledged message reaches every session of its group live.
#                              "default": no reverse topics; sessions and publishers start on the
#                              victim, a session resumed after the kill gets (replayed from the
#                              forward topics) all that was acknowledged before its CONNECT, and
#                              after one more resume of every session, everything. Prints per mode
#                              acknowledged, expected, delivered, duplicates (per resumed session),
#                              resumed sessions and reconnect -> first redelivered message p50/p99
#                              (FERRY_SOAK_SIZE=sessions,groups,publishers,per-stream,rate resizes;
#                              FERRY_SOAK_SPREAD=1 spreads the default mode's sessions and
#                              publishers over the instances, as the reverse mode's)
#   scripts/soak.sh memory     TestIdleConnectionMemory: idle RSS per connection at 1,000 and
#                              10,000 connections, projected to 100,000
#
# Uses FERRY_TEST_KAFKA when set, else starts Kafka with scripts/kafka.sh (and stops it).
# Runs without -race (full size); add RACE=1 to run with the race detector.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
started=0
if [[ -z "${FERRY_TEST_KAFKA:-}" ]]; then
	FERRY_TEST_KAFKA=$(scripts/kafka.sh up | tail -n1)
	started=1
fi
export FERRY_TEST_KAFKA
trap 'if ((started)); then scripts/kafka.sh down; fi' EXIT
race=()
[[ -n "${RACE:-}" ]] && race=(-race)

run() { go test "${race[@]}" -count=1 -v "$@" ./bridge/; }

what=${1:-all}
case "$what" in
soak | all) FERRY_SOAK_DURATION=${FERRY_SOAK_DURATION:-10m} run -timeout 30m -run '^TestSoak$' ;;&
storm | all) run -timeout 10m -run '^TestConnectionStorm$' ;;&
garbage | all) FERRY_SOAK_FULL=1 run -timeout 20m -run '^(TestBadInputGarbage|TestSlowSubscriberReverse)$' ;;&
cluster | all) FERRY_TEST_CLUSTER=1 run -timeout 20m -run '^TestThreeBrokersKillOne$' ;;&
hung | all) FERRY_TEST_CLUSTER=1 run -timeout 10m -run '^TestThreeBrokersHungBroker$' ;;&
scaleout | all) FERRY_SOAK_FULL=1 run -timeout 30m -run '^TestScaleOutHAProxy$' ;;&
sessions | all) FERRY_SOAK_FULL=1 run -timeout 30m -run '^TestSessionsSoakKill9$' ;;&
memory | all) run -timeout 10m -run '^TestIdleConnectionMemory$' ;;&
soak | storm | garbage | cluster | hung | scaleout | sessions | memory | all) ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
