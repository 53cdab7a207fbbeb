package reverse

import (
	"context"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkaclient"
	"github.com/ferry-bridge/ferry/topicmap"
)

// reverseCommitInterval is how often offsets the committer marked safe are
// committed in the background. A crash redelivers what was not committed.
const reverseCommitInterval = time.Second

// reverseSessionTimeout bounds how long a crashed instance's partitions stay
// assigned to its dead member (Kafka's default is 45s).
const reverseSessionTimeout = 10 * time.Second

// reverseFetchMaxWait bounds how long an empty fetch waits at the broker.
const reverseFetchMaxWait = time.Second

// reverseTopicOpts turns reverse.topics (names and /regex/) into kgo
// options. With any regex, every entry is consumed as an anchored regex
// (exact names quoted) and new matching topics are picked up at each
// metadata refresh.
func reverseTopicOpts(topics []string) []kgo.Opt {
	if !anyRegexTopic(topics) {
		return []kgo.Opt{kgo.ConsumeTopics(topics...)}
	}
	res := make([]string, 0, len(topics))
	for _, t := range topics {
		res = append(res, anchoredTopic(t))
	}
	// Ferry's own state topics are never published to MQTT.
	return []kgo.Opt{kgo.ConsumeTopics(res...), kgo.ConsumeRegex(), kgo.ConsumeExcludeTopics("^" + regexp.QuoteMeta(topicmap.FerryPrefix) + ".*$")}
}

func anyRegexTopic(topics []string) bool {
	for _, t := range topics {
		if isRegexTopic(t) {
			return true
		}
	}
	return false
}

// anchoredTopic is a reverse.topics entry as an anchored regex: a /regex/
// as written, a name quoted.
func anchoredTopic(t string) string {
	if isRegexTopic(t) {
		return "^(?:" + t[1:len(t)-1] + ")$"
	}
	return "^" + regexp.QuoteMeta(t) + "$"
}

// TopicMatcher reports whether a Kafka topic is among reverse.topics
// (names exactly, /regex/ entries anchored at both ends: what the consumer
// subscribes), for the session engine's replays. Entries are compiled once;
// config validation (ValidTopic) has checked the regexes.
func TopicMatcher(topics []string) func(string) bool {
	var res []*regexp.Regexp
	for _, t := range topics {
		if re, err := regexp.Compile(anchoredTopic(t)); err == nil {
			res = append(res, re)
		}
	}
	return func(name string) bool {
		for _, re := range res {
			if re.MatchString(name) {
				return true
			}
		}
		return false
	}
}

func isRegexTopic(t string) bool {
	return len(t) >= 2 && strings.HasPrefix(t, "/") && strings.HasSuffix(t, "/")
}

// kgoOpts builds the franz-go consumer options from the config: group,
// topics, start offset, metadata refresh, commit marking, membership (TLS
// and SASL come with Deps.KafkaOpts).
//
// Partitions without a commit start at the first record newer than startAt
// (reverse.start_offset latest) or at their start (earliest). commitSafe is
// called when partitions are revoked: it marks what is safe to commit.
func (r *Consumer) kgoOpts(log *slog.Logger, startAt time.Time, commitSafe func(), client func() *kgo.Client) []kgo.Opt {
	cfg, m := r.cfg, r.metrics
	start := kgo.NewOffset().AfterMilli(startAt.UnixMilli())
	if cfg.StartOffset == "earliest" {
		start = kgo.NewOffset().AtStart()
	}
	refresh := cfg.Refresh
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	if cfg.Demand {
		// A direct consumer of the partitions Want adds, each at the offset
		// it says; the reset offset serves a partition whose offset went
		// out of range (retention): its first record.
		return []kgo.Opt{
			kgo.SeedBrokers(cfg.Brokers...),
			kgo.ClientID("ferry-" + cfg.InstanceID + "-demand"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.MetadataMaxAge(refresh),
			kgo.MetadataMinAge(min(refresh, time.Second)),
			kgo.FetchMaxWait(reverseFetchMaxWait),
			kgo.KeepControlRecords(),
			kgo.FetchIsolationLevel(Isolation(cfg.ReadUncommitted)),
			kgo.WithLogger(kafkaclient.KgoLogger{Logger: log.With("component", "demand-kafka")}),
		}
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID("ferry-" + cfg.InstanceID),
		kgo.ConsumerGroup(cfg.Group()),
		// Dynamic membership: a graceful stop leaves the group, so a restart
		// resumes at once; after a crash the old member is evicted when its
		// session times out. (Static membership, kgo.InstanceID, was tried:
		// the closing client's leave request fenced its own successor.)
		kgo.SessionTimeout(reverseSessionTimeout),
		kgo.ConsumeResetOffset(start),
		kgo.MetadataMaxAge(refresh),
		kgo.MetadataMinAge(min(refresh, time.Second)),
		// A partition assigned while a fetch is parked at the broker is
		// fetched only when that fetch returns: keep the park short, so
		// that a new topic's first records arrive within about refresh +
		// reverseFetchMaxWait (kgo's default is 5s).
		kgo.FetchMaxWait(reverseFetchMaxWait),
		// Transaction markers come as records (handle skips them), so that
		// what has been handed out reaches a partition's end offset.
		kgo.KeepControlRecords(),
		// Committed records only (kafka.isolation_level): an aborted
		// transaction's records are never delivered.
		kgo.FetchIsolationLevel(Isolation(cfg.ReadUncommitted)),
		// Commit only what the committer marked safe, in the background.
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(reverseCommitInterval),
		kgo.WithLogger(kafkaclient.KgoLogger{Logger: log.With("component", "reverse-kafka")}),
		// A revoke (rebalance of a shared group, or a new regex topic) commits
		// what is safe, as kgo's default revoke would, and drops the
		// partitions' lag series.
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
			commitSafe()
			if err := cl.CommitMarkedOffsets(ctx); err != nil {
				log.Warn("commit on revoke", "err", err)
			}
			forgetLag(m, revoked)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) { forgetLag(m, lost) }),
	}
	if cfg.StartOffset != "earliest" {
		opts = append(opts, kgo.AdjustFetchOffsetsFn(StartOffsets(cfg.Group(), startAt, client, log)))
	}
	return append(opts, reverseTopicOpts(cfg.Topics)...)
}

func forgetLag(m Metrics, parts map[string][]int32) {
	for topic, ps := range parts {
		for _, p := range ps {
			m.Lag.DeleteLabelValues(topic, strconv.Itoa(int(p)))
		}
	}
}

// Isolation is the fetch isolation level: read_committed unless
// uncommitted (kafka.isolation_level).
func Isolation(uncommitted bool) kgo.IsolationLevel {
	if uncommitted {
		return kgo.ReadUncommitted()
	}
	return kgo.ReadCommitted()
}
