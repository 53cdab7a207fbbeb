package configs_test

import (
	"bufio"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"golang.org/x/crypto/bcrypt"
	"gopkg.in/yaml.v3"

	"github.com/ferry-bridge/ferry/bridge"
	"github.com/ferry-bridge/ferry/topicmap"
)

// clearFerryEnv hides FERRY_* variables of the developer's shell (viper reads
// the process environment) so that only the file is loaded.
func clearFerryEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "FERRY_") && !strings.HasPrefix(name, "FERRY_TEST") {
			t.Setenv(name, "") // viper ignores empty variables
		}
	}
}

// load reads one file exactly as `bridge --config FILE` does.
func load(t *testing.T, path string) (bridge.Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("bridge", pflag.ContinueOnError)
	f := bridge.BindFlags(fs)
	if err := fs.Parse([]string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	return bridge.LoadConfig(fs, f, os.LookupEnv)
}

func mustLoad(t *testing.T, path string) bridge.Config {
	t.Helper()
	cfg, err := load(t, path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cfg
}

// TestEveryConfigLoads loads every file in configs/ through LoadConfig and
// builds a bridge from it (New validates; certificate files are only opened
// by Run, so the paths in the examples need not exist).
func TestEveryConfigLoads(t *testing.T) {
	clearFerryEnv(t)
	t.Setenv("FERRY_KAFKA_SASL_PASSWORD", "from-the-environment") // tls-auth.yaml's, as documented there
	files, err := filepath.Glob("*.y*ml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"bridge.yaml", "fleet.yaml", "tls-auth.yaml", "compose.yaml"} {
		if !slices.Contains(files, want) {
			t.Errorf("configs/%s is missing", want)
		}
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			cfg := mustLoad(t, f)
			b, err := bridge.New(cfg, nil, nil)
			if err != nil {
				t.Fatalf("bridge.New: %v", err)
			}
			_ = b
		})
	}
}

// normalize makes empty slices and maps nil, recursively, so that "[]" in
// YAML equals an unset default.
func normalize(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			normalize(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Field(i).CanSet() {
				normalize(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Len() == 0 {
			v.SetZero()
			return
		}
		for i := range v.Len() {
			normalize(v.Index(i))
		}
	case reflect.Map:
		if v.Len() == 0 {
			v.SetZero()
		}
	}
}

// TestBridgeYAMLIsTheDefaults: configs/bridge.yaml documents the defaults,
// so loading it gives exactly DefaultConfig() (instance.id is the hostname).
func TestBridgeYAMLIsTheDefaults(t *testing.T) {
	clearFerryEnv(t)
	got := mustLoad(t, "bridge.yaml")
	want := bridge.DefaultConfig()
	got.Instance.ID, want.Instance.ID = "", ""
	normalize(reflect.ValueOf(&got))
	normalize(reflect.ValueOf(&want))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("configs/bridge.yaml differs from DefaultConfig():\n got: %+v\nwant: %+v", got, want)
	}
}

// configKeys lists every leaf key of the config struct (mapstructure tags).
func configKeys(prefix string, rt reflect.Type) []string {
	var keys []string
	for i := range rt.NumField() {
		f := rt.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if tag == "" || tag == "-" {
			continue
		}
		key := tag
		if prefix != "" {
			key = prefix + "." + tag
		}
		if f.Type.Kind() == reflect.Struct && f.Type.PkgPath() != "time" {
			keys = append(keys, configKeys(key, f.Type)...)
			continue
		}
		keys = append(keys, key)
	}
	return keys
}

// TestBridgeYAMLHasEveryKey: every key of bridge.Config appears in
// configs/bridge.yaml; instance.id (default: the hostname) appears as a
// commented example.
func TestBridgeYAMLHasEveryKey(t *testing.T) {
	raw, err := os.ReadFile("bridge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	keys := configKeys("", reflect.TypeFor[bridge.Config]())
	if len(keys) < 40 {
		t.Fatalf("found only %d config keys: %v", len(keys), keys)
	}
	for _, key := range keys {
		if key == "storage.dir" {
			// Removed (state lives in Kafka): kept only so that an old config
			// gets an error that says so; bridge.yaml must not show it.
			if _, ok := doc["storage"]; ok {
				t.Errorf("bridge.yaml still shows the removed storage.dir")
			}
			continue
		}
		if key == "instance.id" {
			if !regexp.MustCompile(`(?m)^\s*#\s*id:`).Match(raw) {
				t.Errorf("bridge.yaml: instance.id is not documented")
			}
			continue
		}
		var node any = doc
		for _, part := range strings.Split(key, ".") {
			m, ok := node.(map[string]any)
			if !ok {
				node = nil
				break
			}
			if node, ok = m[part]; !ok {
				t.Errorf("bridge.yaml lacks key %s", key)
				break
			}
		}
	}
}

func TestFleetConfig(t *testing.T) {
	clearFerryEnv(t)
	cfg := mustLoad(t, "fleet.yaml")
	tm, err := topicmap.New(cfg.Topics)
	if err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{"dev42", "truck-7"} {
		r, err := tm.Forward("fleet/" + dev + "/telemetry")
		if err != nil {
			t.Fatalf("forward %s: %v", dev, err)
		}
		if r.Topic != "fleet-telemetry" || string(r.Key) != dev {
			t.Errorf("fleet/%s/telemetry -> topic %q key %q, want fleet-telemetry key %q", dev, r.Topic, r.Key, dev)
		}
	}
	// Other topics keep the default rule.
	if r, err := tm.Forward("/tacos/pub/lf"); err != nil || r.Topic != "_tacos_pub_lf" {
		t.Errorf("/tacos/pub/lf -> %q, %v; want the default rule", r.Topic, err)
	}
	if !slices.Contains(cfg.Reverse.Topics, "fleet-commands") {
		t.Errorf("reverse.topics = %q, want fleet-commands", cfg.Reverse.Topics)
	}
}

func TestTLSAuthConfig(t *testing.T) {
	clearFerryEnv(t)
	t.Setenv("FERRY_KAFKA_SASL_PASSWORD", "from-the-environment") // as the file's comment says
	cfg := mustLoad(t, "tls-auth.yaml")
	if cfg.MQTT.TLSListen == "" || cfg.MQTT.TLS.Cert == "" || cfg.MQTT.TLS.Key == "" {
		t.Errorf("no TLS listener: %+v", cfg.MQTT)
	}
	if cfg.MQTT.AllowAnonymous {
		t.Error("the TLS + auth example allows anonymous clients")
	}
	// The passwords named in the file's comments match the hashes.
	passwords := map[string]string{"sensor": "sensor-secret", "dashboard": "dashboard-secret"}
	if len(cfg.MQTT.Users) != len(passwords) {
		t.Fatalf("users = %d, want %d", len(cfg.MQTT.Users), len(passwords))
	}
	for _, u := range cfg.MQTT.Users {
		if !strings.HasPrefix(u.Password, "$2") {
			t.Errorf("user %s: password is not a bcrypt hash", u.Username)
		}
		if err := bcrypt.CompareHashAndPassword([]byte(u.Password), []byte(passwords[u.Username])); err != nil {
			t.Errorf("user %s: hash does not match %q: %v", u.Username, passwords[u.Username], err)
		}
		if len(u.Publish) == 0 || len(u.Subscribe) == 0 {
			t.Errorf("user %s: no ACL (publish %q, subscribe %q)", u.Username, u.Publish, u.Subscribe)
		}
	}
	if !cfg.Kafka.TLS.Enabled || cfg.Kafka.SASL.Mechanism == "" {
		t.Errorf("Kafka TLS/SASL not shown: %+v %+v", cfg.Kafka.TLS, cfg.Kafka.SASL)
	}
}

// ---------------------------------------------------------------- compose

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(false)
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

// readmeRow is one line of the README's compose table.
type readmeRow struct{ image, ports, mounts []string }

// readmeComposeTable parses the table between the compose-table markers.
func readmeComposeTable(t *testing.T) map[string]readmeRow {
	t.Helper()
	f, err := os.Open("../docs/deployment.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string]readmeRow{}
	in := false
	code := regexp.MustCompile("`([^`]+)`")
	cells := func(s string) []string {
		var out []string
		for _, m := range code.FindAllStringSubmatch(s, -1) {
			out = append(out, m[1])
		}
		return out
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "<!-- compose-table"):
			in = true
		case strings.HasPrefix(line, "<!-- /compose-table"):
			in = false
		case in && strings.HasPrefix(line, "|") && !strings.HasPrefix(line, "|---") && !strings.HasPrefix(line, "| service"):
			col := strings.Split(strings.Trim(line, "|"), "|")
			if len(col) != 4 {
				t.Fatalf("README compose table: row %q has %d columns, want 4", line, len(col))
			}
			name := cells(col[0])
			if len(name) != 1 {
				t.Fatalf("README compose table: no service name in %q", line)
			}
			rows[name[0]] = readmeRow{image: cells(col[1]), ports: cells(col[2]), mounts: cells(col[3])}
		}
	}
	if len(rows) == 0 {
		t.Fatal("docs/deployment.md has no compose table between <!-- compose-table --> markers")
	}
	return rows
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestComposeMatchesReadme parses docker-compose.yml (no Docker engine runs
// here) and checks it: Kafka 4 in KRaft mode, Ferry built from the
// Dockerfile with its config mounted, and the services, ports and mounts the
// README's Deployment table lists.
func TestComposeMatchesReadme(t *testing.T) {
	clearFerryEnv(t)
	c := readCompose(t)
	readme := readmeComposeTable(t)

	var names, readmeNames []string
	for n := range c.Services {
		names = append(names, n)
	}
	for n := range readme {
		readmeNames = append(readmeNames, n)
	}
	if !slices.Equal(sorted(names), sorted(readmeNames)) || !slices.Equal(sorted(names), []string{"ferry", "kafka"}) {
		t.Fatalf("services: compose %v, README %v, want [ferry kafka]", sorted(names), sorted(readmeNames))
	}
	for name, svc := range c.Services {
		row := readme[name]
		if !slices.Equal(sorted(svc.Ports), sorted(row.ports)) {
			t.Errorf("%s ports: compose %q, README %q", name, svc.Ports, row.ports)
		}
		if !slices.Equal(sorted(svc.Volumes), sorted(row.mounts)) {
			t.Errorf("%s mounts: compose %q, README %q", name, svc.Volumes, row.mounts)
		}
		for _, p := range svc.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %s beyond the host's loopback", name, p)
			}
		}
	}

	kafka := c.Services["kafka"]
	if !strings.HasPrefix(kafka.Image, "apache/kafka:4.") {
		t.Errorf("kafka image %q, want apache/kafka:4.x", kafka.Image)
	}
	if !slices.Equal(readme["kafka"].image, []string{kafka.Image}) {
		t.Errorf("README kafka image %q, compose %q", readme["kafka"].image, kafka.Image)
	}
	roles := kafka.Environment["KAFKA_PROCESS_ROLES"]
	if !strings.Contains(roles, "broker") || !strings.Contains(roles, "controller") {
		t.Errorf("KAFKA_PROCESS_ROLES = %q, want broker,controller (KRaft single node)", roles)
	}
	for k := range kafka.Environment {
		if strings.Contains(k, "ZOOKEEPER") {
			t.Errorf("ZooKeeper setting %s in a KRaft setup", k)
		}
	}

	ferry := c.Services["ferry"]
	if ferry.Build == nil || ferry.Build.Context != "." || ferry.Build.Dockerfile != "Dockerfile" {
		t.Fatalf("ferry build = %+v, want context . and Dockerfile", ferry.Build)
	}
	// The mounted config is the one --config names, it exists in configs/,
	// and it loads (with the compose environment applied).
	i := slices.Index(ferry.Command, "--config")
	if i < 0 || i+1 >= len(ferry.Command) {
		t.Fatalf("ferry command %q has no --config", ferry.Command)
	}
	target := ferry.Command[i+1]
	var hostFile string
	for _, v := range ferry.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == target {
			hostFile = parts[0]
		}
	}
	if !strings.HasPrefix(hostFile, "./configs/") {
		t.Fatalf("no volume mounts a file from ./configs/ at %s: %q", target, ferry.Volumes)
	}
	for k, v := range ferry.Environment {
		t.Setenv(k, v)
	}
	cfg := mustLoad(t, filepath.Join("..", hostFile))

	// Its listeners are the container ports the compose file publishes, and
	// its brokers are the Kafka service's internal listener.
	containerPorts := map[string]bool{}
	for _, p := range ferry.Ports {
		parts := strings.Split(p, ":")
		containerPorts[parts[len(parts)-1]] = true
	}
	for key, addr := range map[string]string{"mqtt.listen": cfg.MQTT.Listen, "http.listen": cfg.HTTP.Listen} {
		_, port, _ := strings.Cut(addr, ":")
		if !containerPorts[port] {
			t.Errorf("%s=%s is not published by the ferry service (%q)", key, addr, ferry.Ports)
		}
	}
	if !containerPorts["1883"] || !containerPorts["8080"] {
		t.Errorf("ferry ports %q, want 1883 and 8080", ferry.Ports)
	}
	advertised := kafka.Environment["KAFKA_ADVERTISED_LISTENERS"]
	for _, b := range cfg.Kafka.Brokers {
		if !strings.Contains(advertised, "//"+b) {
			t.Errorf("kafka.brokers %s is not an advertised listener of the kafka service (%s)", b, advertised)
		}
	}
	if len(cfg.Kafka.Brokers) == 0 {
		t.Error("the compose config has no kafka.brokers: it would start the embedded Kafka")
	}
}

// TestDockerfile: multi-stage, static binary, non-root user, and the config
// path the compose file mounts.
func TestDockerfile(t *testing.T) {
	raw, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var froms, users []string
	var static bool
	var cmd string
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			froms = append(froms, line)
			users = nil // USER applies per stage: keep the last stage's
		case "USER":
			users = append(users, f[1])
		case "RUN":
			if strings.Contains(line, "CGO_ENABLED=0") && strings.Contains(line, "go build") {
				static = true
			}
		case "CMD":
			cmd = line
		}
	}
	if len(froms) < 2 {
		t.Errorf("Dockerfile has %d stages, want a multi-stage build", len(froms))
	}
	if !static {
		t.Error("Dockerfile does not build with CGO_ENABLED=0")
	}
	if len(users) == 0 {
		t.Error("the final stage sets no USER")
	} else if u := users[len(users)-1]; u == "root" || u == "0" || strings.HasPrefix(u, "0:") || strings.HasPrefix(u, "root:") {
		t.Errorf("the final stage runs as %s", u)
	}
	ferry := readCompose(t).Services["ferry"]
	i := slices.Index(ferry.Command, "--config")
	if i < 0 || !strings.Contains(cmd, ferry.Command[i+1]) {
		t.Errorf("Dockerfile %q and compose command %q disagree on the config path", cmd, ferry.Command)
	}
}
