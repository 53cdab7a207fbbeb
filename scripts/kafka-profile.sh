#!/usr/bin/env bash
# kafka-profile.sh - where a Kafka broker on this machine spends its CPU: a JDK Flight Recorder
# CPU profile of the broker JVM while a command runs, summed by method (self) and by the
# first Kafka frame of each stack (inclusive: what Kafka code the time was spent under).
#
#   scripts/kafka-profile.sh OUT_DIR COMMAND [ARGS...]
#
# e.g. the producer-level load of `benchkit kafkacost` on one record shape:
#   go build -o /tmp/benchkit ./bench/benchkit
#   scripts/kafka-profile.sh /tmp/kp-default /tmp/benchkit kafkacost --shapes default --rounds 1 --count 2000000
#
# Needs the JDK's jcmd and jfr (the Kafka of scripts/kafka.sh runs on it) and python3; the broker
# is the one kafka.Kafka process here (KAFKA_PID names another). Writes OUT_DIR/kafka.jfr,
# OUT_DIR/self.txt and OUT_DIR/kafka-frames.txt (top 40 each, percent of the samples) and prints
# both. The recording covers the whole command (warm-up included).
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
out=$1
shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
pid=${KAFKA_PID:-$(pgrep -f 'kafka\.Kafka' | head -n1 || true)}
[ -n "$pid" ] || { echo "kafka-profile.sh: no kafka.Kafka process here (start one: scripts/kafka.sh up)" >&2; exit 1; }
for t in jcmd jfr python3; do
	command -v "$t" >/dev/null || { echo "kafka-profile.sh: $t not found" >&2; exit 1; }
done
name=ferry-profile-$$
jcmd "$pid" JFR.start name="$name" settings=profile filename="$out/kafka.jfr" >/dev/null
stop() { jcmd "$pid" JFR.stop name="$name" >/dev/null 2>&1 || true; }
trap stop EXIT
rc=0
"$@" || rc=$?
stop
trap - EXIT
[ -s "$out/kafka.jfr" ] || { echo "kafka-profile.sh: no recording written" >&2; exit 1; }
jfr print --events jdk.ExecutionSample --stack-depth 64 "$out/kafka.jfr" | python3 -c '
import collections, re, sys
out = sys.argv[1]
selfc, kafkac, n = collections.Counter(), collections.Counter(), 0
frames = None
for line in sys.stdin:
    s = line.strip()
    if s.startswith("stackTrace = ["):
        frames = []
    elif frames is not None and s.startswith("]"):
        if frames:
            n += 1
            selfc[frames[0]] += 1
            k = next((f for f in frames if f.startswith(("kafka.", "org.apache.kafka."))), "(no Kafka frame)")
            kafkac[k] += 1
        frames = None
    elif frames is not None and s and not s.startswith("..."):
        frames.append(re.sub(r"\s+line:.*$", "", s))
def dump(c, path, title):
    with open(path, "w") as f:
        f.write("%s, %d samples\n" % (title, n))
        for k, v in c.most_common(40):
            f.write("%6.2f%%  %s\n" % (100.0 * v / max(n, 1), k))
    print(open(path).read())
dump(selfc, out + "/self.txt", "self (top frame)")
dump(kafkac, out + "/kafka-frames.txt", "under the first Kafka frame of the stack (inclusive)")
' "$out"
exit "$rc"
