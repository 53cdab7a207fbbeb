package deps

import (
	_ "github.com/HdrHistogram/hdrhistogram-go"
	_ "github.com/eclipse/paho.golang/autopaho"
	_ "github.com/eclipse/paho.golang/paho"
	_ "github.com/eclipse/paho.mqtt.golang"
	_ "github.com/gorilla/websocket"
	_ "github.com/mochi-mqtt/server/v2"
	_ "github.com/mochi-mqtt/server/v2/hooks/auth"
	_ "github.com/mochi-mqtt/server/v2/listeners"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/segmentio/kafka-go"
	_ "github.com/spf13/pflag"
	_ "github.com/spf13/viper"
	_ "github.com/twmb/franz-go/pkg/kfake"
	_ "github.com/twmb/franz-go/pkg/kgo"
	_ "golang.org/x/crypto/bcrypt"
	_ "gonum.org/v1/plot"
	_ "gonum.org/v1/plot/plotter"
	_ "gonum.org/v1/plot/vg"
	_ "gopkg.in/yaml.v3"
)
