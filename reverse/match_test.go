package reverse

import "testing"

// TestTopicMatcher: the replay's test of "is this Kafka topic among
// reverse.topics" matches what the consumer subscribes: names exactly,
// /regex/ entries anchored at both ends.
func TestTopicMatcher(t *testing.T) {
	is := TopicMatcher([]string{"orders.v1", "/dev_[0-9]+/"})
	for topic, want := range map[string]bool{
		"orders.v1": true, "ordersxv1": false, "orders.v10": false,
		"dev_42": true, "dev_": false, "xdev_42": false, "dev_42x": false,
	} {
		if got := is(topic); got != want {
			t.Errorf("%q: %v, want %v", topic, got, want)
		}
	}
}
