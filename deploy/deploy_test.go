package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ibex-rdma/ibex/daemon"
)

// capabilities are what ibexd needs (deploy/ibexd.service says what for),
// without the CAP_ prefix that systemd writes and Kubernetes does not.
var capabilities = []string{"NET_ADMIN", "NET_RAW", "BPF", "SYS_NICE", "IPC_LOCK"}

const (
	unitFile    = "ibexd.service"
	configFile  = "/etc/ibex/ibexd.yaml"
	runDir      = "/run/ibex"
	exampleFile = "ibexd.yaml"
	daemonSet   = "kubernetes/ibexd-daemonset.yaml"
)

// ibexCommand is how both the unit and the DaemonSet start the daemon.
var ibexCommand = []string{"ibex", "daemon", "--config", configFile}

func TestSystemdUnit(t *testing.T) {
	data, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	u, err := parseUnit(data)
	if err != nil {
		t.Fatalf("%s: %v", unitFile, err)
	}
	for _, s := range []string{"Unit", "Service", "Install"} {
		if u[s] == nil {
			t.Errorf("%s: no [%s] section", unitFile, s)
		}
	}

	start := u.list("Service", "ExecStart")
	if len(start) == 0 || filepath.Base(start[0]) != "ibex" || !slices.Equal(start[1:], ibexCommand[1:]) {
		t.Errorf("ExecStart=%s, want ibex %s", strings.Join(start, " "), strings.Join(ibexCommand[1:], " "))
	}
	for _, c := range []struct{ key, want string }{
		{"Type", "simple"},
		{"Restart", "on-failure"},
		{"RuntimeDirectory", "ibex"},
		{"LimitMEMLOCK", "infinity"},
	} {
		if got := u.last("Service", c.key); got != c.want {
			t.Errorf("%s=%s, want %s", c.key, got, c.want)
		}
	}
	// RuntimeDirectory= makes /run/ibex, which must hold the socket.
	if got := filepath.Join("/run", u.last("Service", "RuntimeDirectory")); got != filepath.Dir(daemon.DefaultSocket) {
		t.Errorf("RuntimeDirectory makes %s, but the daemon's socket is %s", got, daemon.DefaultSocket)
	}
	for _, key := range []string{"CapabilityBoundingSet", "AmbientCapabilities"} {
		got := u.list("Service", key)
		for _, c := range capabilities {
			if !slices.Contains(got, "CAP_"+c) {
				t.Errorf("%s=%s lacks CAP_%s", key, strings.Join(got, " "), c)
			}
		}
	}
	if got := u.list("Install", "WantedBy"); !slices.Contains(got, "multi-user.target") {
		t.Errorf("WantedBy=%s, want multi-user.target", strings.Join(got, " "))
	}
	if u.last("Unit", "Documentation") == "" {
		t.Error("no Documentation=")
	}

	verifyUnit(t, data)
}

// verifyUnit runs systemd-analyze verify on a copy of the unit. verify
// refuses an ExecStart binary that does not exist, and /usr/local/bin/ibex
// is not installed where tests run, so the copy starts a stand-in script
// with the same arguments; the rest of the unit is verified as written.
func verifyUnit(t *testing.T, unit []byte) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (apt-get install systemd): the unit was checked as text only")
	}
	dir := t.TempDir()
	stand := filepath.Join(dir, "ibex")
	if err := os.WriteFile(stand, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const orig = "ExecStart=/usr/local/bin/ibex "
	if !bytes.Contains(unit, []byte("\n"+orig)) {
		t.Fatalf("%s has no line starting %q to point at a stand-in", unitFile, orig)
	}
	unit = bytes.Replace(unit, []byte("\n"+orig), []byte("\nExecStart="+stand+" "), 1)
	path := filepath.Join(dir, unitFile)
	if err := os.WriteFile(path, unit, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	// verify also reports on units the host has installed; only lines
	// about this one (by path or by unit name) are this test's business.
	var bad []string
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, unitFile) {
			bad = append(bad, strings.TrimSpace(line))
		}
	}
	if len(bad) > 0 {
		t.Errorf("systemd-analyze verify %s:\n%s", unitFile, strings.Join(bad, "\n"))
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		if len(bad) == 0 {
			t.Logf("systemd-analyze verify exited %d, about other units only:\n%s", exit.ExitCode(), out)
		}
	case err != nil:
		t.Fatalf("systemd-analyze verify: %v", err)
	}
}

// unit is a systemd unit file: section, key, then every value the key is
// given, in order.
type unit map[string]map[string][]string

// parseUnit reads the syntax of systemd.syntax(7): [Section] headers,
// Key=Value lines, # and ; comments, backslash continuations.
func parseUnit(data []byte) (unit, error) {
	u := unit{}
	var section string
	sc := bufio.NewScanner(bytes.NewReader(data))
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		for strings.HasSuffix(line, `\`) && sc.Scan() {
			n++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(sc.Text())
		}
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			if !strings.HasSuffix(line, "]") {
				return nil, errLine(n, "section header %q lacks its ]", line)
			}
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			key, value, ok := strings.Cut(line, "=")
			if !ok {
				return nil, errLine(n, "%q is not Key=Value", line)
			}
			if section == "" {
				return nil, errLine(n, "%q is outside any section", line)
			}
			key = strings.TrimSpace(key)
			u[section][key] = append(u[section][key], strings.TrimSpace(value))
		}
	}
	return u, sc.Err()
}

func errLine(n int, format string, args ...any) error {
	return fmt.Errorf("line %d: %s", n, fmt.Sprintf(format, args...))
}

// last is the value a key ends with, as systemd takes a single-valued one.
func (u unit) last(section, key string) string {
	vs := u[section][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// list is the words of a list-valued key, as systemd adds them up: each
// assignment adds to the list and an empty one clears it.
func (u unit) list(section, key string) []string {
	var words []string
	for _, v := range u[section][key] {
		if v == "" {
			words = nil
			continue
		}
		words = append(words, strings.Fields(v)...)
	}
	return words
}

// k8sObject is the part of a manifest's objects that TestDaemonSet checks.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"` // ConfigMap
	Spec struct {          // DaemonSet
		UpdateStrategy struct {
			Type          string `yaml:"type"`
			RollingUpdate struct {
				MaxUnavailable any `yaml:"maxUnavailable"`
			} `yaml:"rollingUpdate"`
		} `yaml:"updateStrategy"`
		Template struct {
			Metadata struct {
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type podSpec struct {
	HostNetwork                   bool           `yaml:"hostNetwork"`
	HostPID                       bool           `yaml:"hostPID"`
	TerminationGracePeriodSeconds *int           `yaml:"terminationGracePeriodSeconds"`
	Tolerations                   []toleration   `yaml:"tolerations"`
	Containers                    []k8sContainer `yaml:"containers"`
	Volumes                       []k8sVolume    `yaml:"volumes"`
}

type toleration struct {
	Key      string `yaml:"key"`
	Operator string `yaml:"operator"`
	Effect   string `yaml:"effect"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []envVar `yaml:"env"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	SecurityContext struct {
		Privileged   *bool `yaml:"privileged"`
		Capabilities struct {
			Add  []string `yaml:"add"`
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	LivenessProbe struct {
		Exec struct {
			Command []string `yaml:"command"`
		} `yaml:"exec"`
	} `yaml:"livenessProbe"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type envVar struct {
	Name      string `yaml:"name"`
	ValueFrom struct {
		FieldRef struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
	} `yaml:"valueFrom"`
}

type k8sVolume struct {
	Name     string `yaml:"name"`
	HostPath *struct {
		Path string `yaml:"path"`
		Type string `yaml:"type"`
	} `yaml:"hostPath"`
	ConfigMap *struct {
		Name string `yaml:"name"`
	} `yaml:"configMap"`
}

func TestDaemonSet(t *testing.T) {
	cm, ds := readManifest(t)
	if cm.APIVersion != "v1" || ds.APIVersion != "apps/v1" {
		t.Errorf("apiVersions: ConfigMap %q, DaemonSet %q; want v1 and apps/v1", cm.APIVersion, ds.APIVersion)
	}
	if ns := ds.Metadata.Namespace; ns != "kube-system" && ns != "ibex-system" || cm.Metadata.Namespace != ns {
		t.Errorf("namespaces: DaemonSet %q, ConfigMap %q; want both kube-system or ibex-system", ns, cm.Metadata.Namespace)
	}

	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork {
		t.Error("hostNetwork is not true: the devices must bind the node's addresses")
	}
	if pod.HostPID {
		t.Error("hostPID is true")
	}
	if !slices.ContainsFunc(pod.Tolerations, func(x toleration) bool { return x.Operator == "Exists" && x.Key == "" && x.Effect == "" }) {
		t.Errorf("tolerations %+v do not tolerate every taint ({operator: Exists})", pod.Tolerations)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g <= 0 {
		t.Error("terminationGracePeriodSeconds not set")
	}
	if u := ds.Spec.UpdateStrategy; u.Type != "RollingUpdate" || u.RollingUpdate.MaxUnavailable != 1 {
		t.Errorf("updateStrategy %+v, want RollingUpdate with maxUnavailable 1", u)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image == "" {
		t.Error("no image")
	}
	if cmd := append(slices.Clone(c.Command), c.Args...); !slices.Equal(cmd, ibexCommand) {
		t.Errorf("command %q, want %q", cmd, ibexCommand)
	}

	sc := c.SecurityContext
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged: true; the capabilities are all it needs")
	}
	for _, want := range capabilities {
		if !slices.Contains(sc.Capabilities.Add, want) {
			t.Errorf("capabilities.add %q lacks %s", sc.Capabilities.Add, want)
		}
	}

	for _, r := range []string{"cpu", "memory"} {
		if c.Resources.Requests[r] == "" || c.Resources.Limits[r] == "" {
			t.Errorf("resources: %s request %q, limit %q; want both", r, c.Resources.Requests[r], c.Resources.Limits[r])
		}
	}

	// The node's /run/ibex, where applications find the socket.
	run := volume(pod, func(v k8sVolume) bool { return v.HostPath != nil && v.HostPath.Path == runDir })
	if run == nil {
		t.Errorf("no hostPath volume of %s", runDir)
	} else {
		if run.HostPath.Type != "DirectoryOrCreate" {
			t.Errorf("hostPath %s has type %q, want DirectoryOrCreate", runDir, run.HostPath.Type)
		}
		if m := mountOf(c, run.Name); m != runDir {
			t.Errorf("volume %s is mounted at %q, want %s", run.Name, m, runDir)
		}
	}

	// The ConfigMap, mounted where the command reads the config.
	conf := volume(pod, func(v k8sVolume) bool { return v.ConfigMap != nil && v.ConfigMap.Name == cm.Metadata.Name })
	if conf == nil {
		t.Fatalf("no volume of ConfigMap %s", cm.Metadata.Name)
	}
	dir := mountOf(c, conf.Name)
	text, ok := cm.Data[filepath.Base(configFile)]
	if dir != filepath.Dir(configFile) || !ok {
		t.Fatalf("ConfigMap %s (keys %v) mounted at %q; the command reads %s", cm.Metadata.Name, slices.Sorted(maps.Keys(cm.Data)), dir, configFile)
	}

	// The config leaves devices out: each node's udp0 is on its own IP.
	hostIP := slices.ContainsFunc(c.Env, func(e envVar) bool {
		return e.Name == "IBEX_UDP_ADDR" && e.ValueFrom.FieldRef.FieldPath == "status.hostIP"
	})
	if !hostIP {
		t.Error("no IBEX_UDP_ADDR from status.hostIP: every node's udp0 would be on 127.0.0.1")
	}
	t.Setenv("IBEX_UDP_ADDR", "10.1.2.3")
	cfg, err := daemon.ParseConfig([]byte(text))
	if err != nil {
		t.Fatalf("ConfigMap %s, %s:\n%v", cm.Metadata.Name, filepath.Base(configFile), err)
	}
	if len(cfg.Devices) != 1 || cfg.Devices[0].AddrPort().String() != "10.1.2.3:4791" {
		t.Errorf("devices %+v, want udp0 on the node's IP", cfg.Devices)
	}
	if filepath.Dir(cfg.Socket) != runDir {
		t.Errorf("the config's socket %s is not in %s, which the node shares", cfg.Socket, runDir)
	}

	want := []string{"ibex", "daemon", "status", "--socket", cfg.Socket}
	if got := c.LivenessProbe.Exec.Command; !slices.Equal(got, want) {
		t.Errorf("livenessProbe command %q, want %q", got, want)
	}

	// Prometheus: the config's metrics port is the container's port named
	// metrics and the one the pod's scrape annotations give.
	_, port, err := net.SplitHostPort(cfg.Metrics)
	if err != nil {
		t.Fatalf("the config's metrics %q: %v (the daemon would serve no metrics)", cfg.Metrics, err)
	}
	named := ""
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			named = strconv.Itoa(p.ContainerPort)
		}
	}
	if named != port {
		t.Errorf("container port named metrics %q, want the config's metrics port %s", named, port)
	}
	a := ds.Spec.Template.Metadata.Annotations
	if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != port || a["prometheus.io/path"] != "/metrics" {
		t.Errorf("pod annotations %v, want prometheus.io/scrape true, port %s, path /metrics", a, port)
	}
}

// readManifest decodes every document of the DaemonSet's manifest and
// returns its ConfigMap and DaemonSet, the only kinds it may hold.
func readManifest(t *testing.T) (cm, ds *k8sObject) {
	t.Helper()
	data, err := os.ReadFile(daemonSet)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var o k8sObject
		err := dec.Decode(&o)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", daemonSet, i, err)
		}
		switch o.Kind {
		case "": // the comments before the first ---
		case "ConfigMap":
			cm = &o
		case "DaemonSet":
			ds = &o
		default:
			t.Errorf("%s: document %d is a %s, want a ConfigMap or a DaemonSet", daemonSet, i, o.Kind)
		}
	}
	if cm == nil || ds == nil {
		t.Fatalf("%s: want a ConfigMap and a DaemonSet", daemonSet)
	}
	return cm, ds
}

func volume(pod podSpec, match func(k8sVolume) bool) *k8sVolume {
	i := slices.IndexFunc(pod.Volumes, match)
	if i < 0 {
		return nil
	}
	return &pod.Volumes[i]
}

// mountOf is where c mounts volume name, or "".
func mountOf(c k8sContainer, name string) string {
	for _, m := range c.VolumeMounts {
		if m.Name == name {
			return m.MountPath
		}
	}
	return ""
}

// TestExampleConfig checks that deploy/ibexd.yaml is a valid config and,
// being the example, gives every field the daemon reads.
func TestExampleConfig(t *testing.T) {
	data, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for _, f := range missingFields(reflect.TypeFor[daemon.Config](), doc, "") {
		t.Errorf("%s does not give %s", exampleFile, f)
	}

	_, err = daemon.ParseConfig(data)
	if err != nil && onlyCores(err) {
		// The example pins to CPUs this machine (or this process's
		// cpuset) may not have; everything else must still be right.
		t.Logf("%s: this machine lacks the example's cores; checking the rest without them:\n%v", exampleFile, err)
		delete(doc, "cores")
		if data, err = yaml.Marshal(doc); err != nil {
			t.Fatal(err)
		}
		_, err = daemon.ParseConfig(data)
	}
	if err != nil {
		t.Errorf("%s:\n%v", exampleFile, err)
	}
}

// onlyCores says whether every error err joins is about a cores entry.
func onlyCores(err error) bool {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		if !strings.HasPrefix(e.Error(), "cores[") {
			return false
		}
	}
	return true
}

// missingFields lists the yaml paths of type t's fields that v, a decoded
// YAML value of it, does not give. A list gives a field if any of its
// items does.
func missingFields(t reflect.Type, v any, path string) []string {
	switch t.Kind() {
	case reflect.Slice:
		if t.Elem().Kind() != reflect.Struct {
			return nil
		}
		items, _ := v.([]any)
		missing := missingFields(t.Elem(), nil, path+"[]")
		for _, item := range items {
			m := missingFields(t.Elem(), item, path+"[]")
			missing = slices.DeleteFunc(missing, func(f string) bool { return !slices.Contains(m, f) })
		}
		return missing
	case reflect.Struct:
		m, _ := v.(map[string]any)
		var missing []string
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			p := name
			if path != "" {
				p = path + "." + name
			}
			sub, ok := m[name]
			if !ok {
				missing = append(missing, p)
				continue
			}
			missing = append(missing, missingFields(f.Type, sub, p)...)
		}
		return missing
	}
	return nil
}
