package kafkawatch

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// TestReplicationWarning: the start-up check warns when the topics Ferry
// creates would keep one copy on a cluster of several brokers: configured
// 1, or -1 with the brokers' default.replication.factor 1. Not with -1 and
// a default of 3, nor on one broker. (A bridge makes the check at start:
// TestReplicationWarningAtStart, package bridge.)
func TestReplicationWarning(t *testing.T) {
	for _, tc := range []struct {
		name       string
		brokers    int
		def        string // default.replication.factor; "": kfake's (3)
		configured int
		warn       string
	}{
		{"configured 1 on 3 brokers", 3, "", 1, "kafka.replication_factor is 1 on a cluster of several brokers"},
		{"cluster default 1 on 3 brokers", 3, "1", -1, "which is 1 on a cluster of several brokers"},
		{"cluster default 3 on 3 brokers", 3, "", -1, ""},
		{"configured 3 on 3 brokers", 3, "1", 3, ""},
		{"configured 1 on 1 broker", 1, "", 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []kfake.Opt{kfake.NumBrokers(tc.brokers)}
			if tc.def != "" {
				opts = append(opts, kfake.BrokerConfigs(map[string]string{"default.replication.factor": tc.def}))
			}
			fake, err := kfake.NewCluster(opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer fake.Close()
			client := kafkatest.Client(strings.Join(fake.ListenAddrs(), ","))
			defer kafkatest.CloseClient(client)
			logs := new(bytes.Buffer)
			rc := &ReplicationCheck{Log: slog.New(slog.NewTextHandler(logs, nil)), Client: client, Configured: tc.configured, Retry: 10 * time.Millisecond}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := rc.Check(ctx); err != nil {
				t.Fatal(err)
			}
			got := logs.String()
			switch {
			case tc.warn == "" && got != "":
				t.Errorf("logged %q, want nothing", got)
			case tc.warn != "" && (!strings.Contains(got, "level=WARN") || !strings.Contains(got, tc.warn)):
				t.Errorf("logged %q, want a WARN saying %q", got, tc.warn)
			}
		})
	}
}
