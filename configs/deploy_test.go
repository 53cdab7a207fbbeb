package configs_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ferry-bridge/ferry/bridge"
)

const k8sDir = "../deploy/kubernetes"

type k8sMeta struct {
	Name        string            `yaml:"name"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type k8sObject struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   k8sMeta           `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Spec       yaml.Node         `yaml:"spec"`
	Resources  []string          `yaml:"resources"`
	Namespace  string            `yaml:"namespace"`
	Images     []k8sImage        `yaml:"images"`
	file       string
}

// k8sImage is a kustomization images: entry.
type k8sImage struct {
	Name    string `yaml:"name"`
	NewName string `yaml:"newName"`
	NewTag  string `yaml:"newTag"`
}

type k8sPort struct {
	Name          string `yaml:"name"`
	ContainerPort int    `yaml:"containerPort"`
	Port          int    `yaml:"port"`
	TargetPort    any    `yaml:"targetPort"`
	Protocol      string `yaml:"protocol"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

type k8sEnv struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		FieldRef *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
		SecretKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

type k8sContainer struct {
	Name            string    `yaml:"name"`
	Image           string    `yaml:"image"`
	ImagePullPolicy string    `yaml:"imagePullPolicy"`
	Args            []string  `yaml:"args"`
	Ports           []k8sPort `yaml:"ports"`
	Env             []k8sEnv  `yaml:"env"`
	ReadinessProbe  *k8sProbe `yaml:"readinessProbe"`
	LivenessProbe   *k8sProbe `yaml:"livenessProbe"`
	Resources       struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

type k8sStatefulSet struct {
	ServiceName string `yaml:"serviceName"`
	Replicas    int    `yaml:"replicas"`
	Selector    struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Template struct {
		Metadata k8sMeta `yaml:"metadata"`
		Spec     struct {
			TerminationGracePeriodSeconds int            `yaml:"terminationGracePeriodSeconds"`
			Containers                    []k8sContainer `yaml:"containers"`
			Volumes                       []struct {
				Name      string `yaml:"name"`
				ConfigMap *struct {
					Name string `yaml:"name"`
				} `yaml:"configMap"`
				Secret *struct {
					SecretName string `yaml:"secretName"`
				} `yaml:"secret"`
			} `yaml:"volumes"`
		} `yaml:"spec"`
	} `yaml:"template"`
	VolumeClaimTemplates []struct {
		Metadata k8sMeta `yaml:"metadata"`
	} `yaml:"volumeClaimTemplates"`
}

type k8sService struct {
	Type      string            `yaml:"type"`
	ClusterIP string            `yaml:"clusterIP"`
	Selector  map[string]string `yaml:"selector"`
	Ports     []k8sPort         `yaml:"ports"`
}

type k8sPDB struct {
	MaxUnavailable any `yaml:"maxUnavailable"`
	Selector       struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
}

// readManifests parses every document of every YAML file in deploy/kubernetes.
func readManifests(t *testing.T) (objs []k8sObject, files []string) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests in %s: %v", k8sDir, err)
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(f)
		for {
			var o k8sObject
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			o.file = filepath.Base(p)
			objs = append(objs, o)
		}
		f.Close()
		files = append(files, filepath.Base(p))
	}
	return objs, files
}

func find(t *testing.T, objs []k8sObject, kind, name string) k8sObject {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && (name == "" || o.Metadata.Name == name) {
			return o
		}
	}
	t.Fatalf("no %s %q in %s", kind, name, k8sDir)
	return k8sObject{}
}

func decodeSpec[T any](t *testing.T, o k8sObject) T {
	t.Helper()
	var v T
	if err := o.Spec.Decode(&v); err != nil {
		t.Fatalf("%s %s spec: %v", o.Kind, o.Metadata.Name, err)
	}
	return v
}

func portOf(t *testing.T, key, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, addr, err)
	}
	return n
}

// envName is the FERRY_* variable of a config key (viper: dots -> "_").
func envName(key string) string { return "FERRY_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_")) }

// TestKubernetesManifests parses deploy/kubernetes/ (no cluster runs here)
// and checks it against the code: the ConfigMap's ferry.yaml loads with the
// pod's environment applied; every FERRY_* variable is a config key; every
// listener port is a container port and every container port a listener;
// the Services expose the MQTT listeners (TCP LoadBalancer) and the HTTP
// port; probe paths and the metrics path answer on a running bridge; the
// config, TLS and storage paths are the mounted volumes; secrets referenced
// exist with the keys used; selectors match the pod labels; the grace
// period outlasts shutdown_timeout.
func TestKubernetesManifests(t *testing.T) {
	clearFerryEnv(t)
	objs, files := readManifests(t)

	kust := find(t, objs, "Kustomization", "")
	// Every manifest is applied except examples (*.example.yaml).
	want := slices.DeleteFunc(slices.Clone(files), func(f string) bool {
		return f == "kustomization.yaml" || strings.HasSuffix(f, ".example.yaml")
	})
	if !slices.Equal(sorted(kust.Resources), sorted(want)) {
		t.Errorf("kustomization resources %q, files %q", kust.Resources, want)
	}
	// No Secret is applied by apply -k: it would overwrite the real secrets,
	// created by the documented kubectl commands, with placeholders.
	for _, o := range objs {
		if o.Kind == "Secret" && slices.Contains(kust.Resources, o.file) {
			t.Errorf("Secret %s is in the kustomization (%s): kubectl apply -k would overwrite the real one", o.Metadata.Name, o.file)
		}
	}
	if kust.Namespace != "ferry" {
		t.Errorf("kustomization namespace %q, want ferry (the namespace of the documented commands)", kust.Namespace)
	}
	for _, o := range objs {
		if o.Kind != "Kustomization" && o.Metadata.Labels["app.kubernetes.io/name"] != "ferry" {
			t.Errorf("%s %s (%s) lacks the label app.kubernetes.io/name: ferry", o.Kind, o.Metadata.Name, o.file)
		}
	}

	stsObj := find(t, objs, "StatefulSet", "ferry")
	sts := decodeSpec[k8sStatefulSet](t, stsObj)
	pod := sts.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	// The image: a name the kustomization maps to a pushed, tagged image, and
	// a pull policy that works for it (latest would be pulled on every start,
	// and an image built only locally could never be).
	if c.ImagePullPolicy != "IfNotPresent" {
		t.Errorf("imagePullPolicy %q, want IfNotPresent", c.ImagePullPolicy)
	}
	if i := slices.IndexFunc(kust.Images, func(im k8sImage) bool { return im.Name == c.Image }); i < 0 || kust.Images[i].NewTag == "" || kust.Images[i].NewTag == "latest" || kust.Images[i].NewName == "" {
		t.Errorf("image %q has no images: entry with a name and a fixed tag in the kustomization (%+v)", c.Image, kust.Images)
	}
	podLabels := sts.Template.Metadata.Labels
	if !reflect.DeepEqual(sts.Selector.MatchLabels, podLabels) {
		t.Errorf("StatefulSet selector %v, pod labels %v", sts.Selector.MatchLabels, podLabels)
	}

	// Volumes by mount path.
	mounts := map[string]string{} // mount path (+ "/" + subPath for files) -> volume name
	subPaths := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
		subPaths[m.MountPath] = m.SubPath
	}
	configMapOf, secretOf := map[string]string{}, map[string]string{}
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil {
			configMapOf[v.Name] = v.ConfigMap.Name
		}
		if v.Secret != nil {
			secretOf[v.Name] = v.Secret.SecretName
		}
	}
	claims := map[string]bool{}
	for _, vc := range sts.VolumeClaimTemplates {
		claims[vc.Metadata.Name] = true
	}
	secretKeys := func(name string) map[string]string {
		for _, o := range objs {
			if o.Kind == "Secret" && o.Metadata.Name == name {
				return o.StringData
			}
		}
		t.Errorf("secret %s is referenced but not in %s", name, k8sDir)
		return nil
	}

	// The config file: --config names a file mounted from the ConfigMap.
	i := slices.Index(c.Args, "--config")
	if i < 0 || i+1 >= len(c.Args) {
		t.Fatalf("container args %q have no --config", c.Args)
	}
	cfgPath := c.Args[i+1]
	vol, ok := mounts[cfgPath]
	if !ok || configMapOf[vol] == "" {
		t.Fatalf("--config %s is not a ConfigMap mount (%v)", cfgPath, mounts)
	}
	cm := find(t, objs, "ConfigMap", configMapOf[vol])
	body, ok := cm.Data[subPaths[cfgPath]]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %q (the subPath mounted at %s)", cm.Metadata.Name, subPaths[cfgPath], cfgPath)
	}
	// The Dockerfile's CMD reads the same path (the image works unchanged).
	if df, err := os.ReadFile("../Dockerfile"); err != nil || !strings.Contains(string(df), `"--config", "`+cfgPath+`"`) {
		t.Errorf("the Dockerfile's CMD does not read %s", cfgPath)
	}

	// Environment: every FERRY_* variable is a config key (or pending).
	keys := map[string]string{}
	for _, k := range configKeys("", reflect.TypeFor[bridge.Config]()) {
		keys[envName(k)] = k
	}
	env := map[string]string{}
	for _, e := range c.Env {
		key, ok := keys[e.Name]
		if !ok {
			t.Errorf("env %s is not a Ferry config key", e.Name)
		}
		val := e.Value
		switch {
		case e.ValueFrom == nil:
		case e.ValueFrom.FieldRef != nil:
			if e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Errorf("env %s from %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			val = stsObj.Metadata.Name + "-0"
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := secretKeys(ref.Name)[ref.Key]
			if !ok {
				t.Errorf("env %s: secret %s has no key %s", e.Name, ref.Name, ref.Key)
			}
			val = v
		}
		env[key] = val
		t.Setenv(e.Name, val)
	}
	cfgFile := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(cfgFile, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := mustLoad(t, cfgFile)
	if _, err := bridge.New(cfg, nil, nil); err != nil {
		t.Fatalf("the ConfigMap's config with the pod's environment: %v", err)
	}
	if cfg.Instance.ID != stsObj.Metadata.Name+"-0" {
		t.Errorf("instance.id = %q, want the pod name (FERRY_INSTANCE_ID from metadata.name)", cfg.Instance.ID)
	}
	if cfg.Kafka.SASL.Mechanism != "" && cfg.Kafka.SASL.Password == "" {
		t.Error("kafka.sasl is on but no password reaches the config (FERRY_KAFKA_SASL_PASSWORD from a secret)")
	}
	for _, u := range cfg.MQTT.Users {
		if !strings.HasPrefix(u.Password, "$2") {
			t.Errorf("mqtt user %s: a plain-text password in the ConfigMap (use a bcrypt hash)", u.Username)
		}
	}
	if len(cfg.Kafka.Brokers) == 0 {
		t.Error("the ConfigMap has no kafka.brokers: Ferry would start the embedded Kafka")
	}
	// Pods are stateless: sessions and retained messages live in Kafka.
	if _, ok := env["storage.dir"]; ok || len(claims) > 0 {
		t.Errorf("the StatefulSet keeps state on a volume (storage.dir %q, claims %v): state lives in Kafka", env["storage.dir"], claims)
	}
	// Certificate files are in a mounted secret that has them.
	for key, file := range map[string]string{"mqtt.tls.cert": cfg.MQTT.TLS.Cert, "mqtt.tls.key": cfg.MQTT.TLS.Key, "mqtt.tls.ca": cfg.MQTT.TLS.CA,
		"kafka.tls.cert": cfg.Kafka.TLS.Cert, "kafka.tls.key": cfg.Kafka.TLS.Key, "kafka.tls.ca": cfg.Kafka.TLS.CA} {
		if file == "" {
			continue
		}
		v, ok := mounts[path.Dir(file)]
		if !ok || secretOf[v] == "" {
			t.Errorf("%s=%s is not in a mounted secret (mounts %v)", key, file, mounts)
			continue
		}
		if _, ok := secretKeys(secretOf[v])[path.Base(file)]; !ok {
			t.Errorf("%s=%s: secret %s has no key %s", key, file, secretOf[v], path.Base(file))
		}
	}

	// Ports: listeners <-> container ports.
	listeners := map[int]string{}
	for key, addr := range map[string]string{"mqtt.listen": cfg.MQTT.Listen, "mqtt.tls_listen": cfg.MQTT.TLSListen, "mqtt.ws_listen": cfg.MQTT.WSListen, "http.listen": cfg.HTTP.Listen} {
		if addr != "" {
			if host, _, _ := net.SplitHostPort(addr); host != "0.0.0.0" && host != "" && host != "::" {
				t.Errorf("%s=%s: a pod must listen on all its interfaces", key, addr)
			}
			listeners[portOf(t, key, addr)] = key
		}
	}
	byName := map[string]int{}
	for _, p := range c.Ports {
		byName[p.Name] = p.ContainerPort
		if _, ok := listeners[p.ContainerPort]; !ok {
			t.Errorf("container port %s %d is no listener of the config (%v)", p.Name, p.ContainerPort, listeners)
		}
		if p.Protocol != "TCP" {
			t.Errorf("container port %s: protocol %q", p.Name, p.Protocol)
		}
	}
	for port, key := range listeners {
		if !slices.ContainsFunc(c.Ports, func(p k8sPort) bool { return p.ContainerPort == port }) {
			t.Errorf("%s port %d is not a container port", key, port)
		}
	}
	resolve := func(where string, p any) int {
		switch v := p.(type) {
		case int:
			return v
		case string:
			if n, ok := byName[v]; ok {
				return n
			}
		}
		t.Errorf("%s: port %v is no container port", where, p)
		return -1
	}
	httpPort := portOf(t, "http.listen", cfg.HTTP.Listen)
	mqttPorts := []int{}
	for port, key := range listeners {
		if key != "http.listen" {
			mqttPorts = append(mqttPorts, port)
		}
	}

	// Services.
	lb := decodeSpec[k8sService](t, find(t, objs, "Service", "ferry-mqtt"))
	if lb.Type != "LoadBalancer" {
		t.Errorf("ferry-mqtt type %q, want LoadBalancer", lb.Type)
	}
	var exposed []int
	for _, p := range lb.Ports {
		if p.Protocol != "TCP" {
			t.Errorf("ferry-mqtt port %s: protocol %q, want TCP", p.Name, p.Protocol)
		}
		exposed = append(exposed, resolve("ferry-mqtt "+p.Name, p.TargetPort))
	}
	slices.Sort(exposed)
	slices.Sort(mqttPorts)
	if !slices.Equal(exposed, mqttPorts) {
		t.Errorf("ferry-mqtt exposes container ports %v, the MQTT listeners are %v", exposed, mqttPorts)
	}
	metricsObj := find(t, objs, "Service", "ferry-metrics")
	ms := decodeSpec[k8sService](t, metricsObj)
	if len(ms.Ports) != 1 || resolve("ferry-metrics", ms.Ports[0].TargetPort) != httpPort {
		t.Errorf("ferry-metrics ports %+v, want one to http.listen port %d", ms.Ports, httpPort)
	}
	if a := metricsObj.Metadata.Annotations; a["prometheus.io/port"] != strconv.Itoa(ms.Ports[0].Port) || a["prometheus.io/path"] != "/metrics" {
		t.Errorf("ferry-metrics scrape annotations %v", a)
	}
	headless := decodeSpec[k8sService](t, find(t, objs, "Service", sts.ServiceName))
	if headless.ClusterIP != "None" {
		t.Errorf("serviceName %s is not headless (clusterIP %q)", sts.ServiceName, headless.ClusterIP)
	}
	for _, o := range objs {
		if o.Kind == "Service" {
			if s := decodeSpec[k8sService](t, o); !reflect.DeepEqual(s.Selector, podLabels) {
				t.Errorf("service %s selects %v, pods are %v", o.Metadata.Name, s.Selector, podLabels)
			}
		}
	}
	pdb := decodeSpec[k8sPDB](t, find(t, objs, "PodDisruptionBudget", ""))
	if !reflect.DeepEqual(pdb.Selector.MatchLabels, podLabels) {
		t.Errorf("PodDisruptionBudget selects %v, pods are %v", pdb.Selector.MatchLabels, podLabels)
	}
	if n, ok := pdb.MaxUnavailable.(int); !ok || n < 1 || n >= sts.Replicas {
		t.Errorf("PodDisruptionBudget maxUnavailable %v with %d replicas", pdb.MaxUnavailable, sts.Replicas)
	}
	if grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second; grace <= cfg.ShutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds %s <= shutdown_timeout %s: the drain would be cut", grace, cfg.ShutdownTimeout)
	}
	if c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" || c.Resources.Requests["cpu"] == "" {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}

	// Probes on the HTTP port, at paths a running bridge answers.
	probes := map[string]*k8sProbe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe}
	wantPath := map[string]string{"readiness": "/readyz", "liveness": "/healthz"}
	b := runBridge(t, bridge.DefaultConfig())
	for kind, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no %s probe over HTTP", kind)
			continue
		}
		if p.HTTPGet.Path != wantPath[kind] {
			t.Errorf("%s probe path %s, want %s", kind, p.HTTPGet.Path, wantPath[kind])
		}
		if got := resolve(kind+" probe", p.HTTPGet.Port); got != httpPort {
			t.Errorf("%s probe port %d, http.listen is %d", kind, got, httpPort)
		}
		poll(t, 10*time.Second, kind+" probe path answering 200", func() bool {
			code, _ := httpGet(t, "http://"+b.HTTPAddr()+p.HTTPGet.Path)
			return code == http.StatusOK
		})
	}
	if code, _ := httpGet(t, "http://"+b.HTTPAddr()+"/metrics"); code != http.StatusOK {
		t.Errorf("/metrics: %d", code)
	}
	if code, _ := httpGet(t, "http://"+b.HTTPAddr()+"/nonexistent"); code == http.StatusOK {
		t.Error("the probe check cannot fail: an unknown path answers 200")
	}
}
