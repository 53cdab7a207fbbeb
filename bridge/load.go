package bridge

import (
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"gopkg.in/yaml.v3"

	"github.com/ferry-bridge/ferry/internal/envcheck"
)

// Flags are the command-line flags of cmd/bridge; each overrides the config
// file and FERRY_* environment variables.
type Flags struct {
	ConfigFile  string
	CheckConfig bool
}

// BindFlags declares the contract flags (--config, --kafka, --mqtt-listen,
// --http-listen, --reverse-topics, --instance-id, --log-level,
// --check-config) on fs.
func BindFlags(fs *pflag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.ConfigFile, "config", "", "YAML config `FILE` (see configs/bridge.yaml)")
	fs.BoolVar(&f.CheckConfig, "check-config", false, "validate the configuration and exit (0 valid, 1 invalid)")
	fs.String("kafka", "", "Kafka bootstrap `BROKERS` host:port[,host:port...] (default: an embedded in-memory Kafka)")
	fs.String("mqtt-listen", "", "MQTT TCP listener `ADDR` (default 127.0.0.1:1883)")
	fs.String("http-listen", "", "HTTP listener `ADDR` for /metrics, /healthz, /readyz (default 127.0.0.1:8080)")
	fs.String("reverse-topics", "", "Kafka `TOPICS` to publish to MQTT subscribers: names or /regex/, comma-separated (default: none, no Kafka -> MQTT path)")
	fs.String("instance-id", "", "instance id for origin headers and the reverse consumer group (default: hostname)")
	fs.String("log-level", "", "log level: debug, info, warn, error")
	return f
}

// flagKeys maps flag names to config keys.
var flagKeys = map[string]string{
	"kafka":          "kafka.brokers",
	"mqtt-listen":    "mqtt.listen",
	"http-listen":    "http.listen",
	"instance-id":    "instance.id",
	"reverse-topics": "reverse.topics",
	"log-level":      "log.level",
}

// LoadConfig builds the configuration: defaults < YAML file < FERRY_*
// environment < flags. Unknown keys in the file and FERRY_* variables that
// name no key are errors. The result is validated.
func LoadConfig(fs *pflag.FlagSet, f *Flags, env func(string) (string, bool)) (Config, error) {
	v := viper.New()
	def := DefaultConfig()
	setDefaults(v, "", reflect.ValueOf(def))
	if env != nil {
		// viper reads the process environment; the lookup decides values.
		if err := envcheck.Check(os.Environ(), env, v.AllKeys()); err != nil {
			return Config{}, err
		}
	}
	v.SetEnvPrefix("FERRY")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	if f.ConfigFile != "" {
		v.SetConfigFile(f.ConfigFile)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return Config{}, fmt.Errorf("config file %s: %w", f.ConfigFile, err)
		}
	}
	if env != nil {
		// Lists from the environment are comma-separated.
		for _, key := range []string{"kafka.brokers", "kafka.headers", "reverse.topics", "topics.exclude"} {
			name := "FERRY_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
			if val, ok := env(name); ok {
				v.Set(key, splitList(val))
			}
		}
	}
	fs.Visit(func(fl *pflag.Flag) {
		key, ok := flagKeys[fl.Name]
		if !ok {
			return
		}
		if key == "kafka.brokers" || key == "reverse.topics" {
			v.Set(key, splitList(fl.Value.String()))
			return
		}
		v.Set(key, fl.Value.String())
	})
	var cfg Config
	err := v.UnmarshalExact(&cfg, func(dc *mapstructure.DecoderConfig) {
		dc.DecodeHook = mapstructure.ComposeDecodeHookFunc(
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
		)
	})
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if f.ConfigFile != "" {
		// viper lowercases map keys; header names are case-sensitive.
		if err := restoreHeaderCase(f.ConfigFile, &cfg); err != nil {
			return Config{}, err
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// restoreHeaderCase re-reads the forward rules' header maps from the YAML
// file with their keys as written.
func restoreHeaderCase(path string, cfg *Config) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	var raw struct {
		Topics struct {
			Forward []struct {
				Headers map[string]string `yaml:"headers"`
			} `yaml:"forward"`
		} `yaml:"topics"`
	}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	for i, r := range raw.Topics.Forward {
		if i < len(cfg.Topics.Forward) && len(r.Headers) == len(cfg.Topics.Forward[i].Headers) && len(r.Headers) > 0 {
			cfg.Topics.Forward[i].Headers = r.Headers
		}
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// setDefaults registers every leaf key of the default config, so that each
// key can be set from the environment (viper ignores env vars for unknown
// keys).
func setDefaults(v *viper.Viper, prefix string, rv reflect.Value) {
	rt := rv.Type()
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		tag := strings.Split(f.Tag.Get("mapstructure"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		key := tag
		if prefix != "" {
			key = prefix + "." + tag
		}
		fv := rv.Field(i)
		if fv.Kind() == reflect.Struct {
			setDefaults(v, key, fv)
			continue
		}
		v.SetDefault(key, fv.Interface())
	}
}
