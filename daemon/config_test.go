package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// defaults is the config of an empty file with IBEX_UDP_ADDR unset.
var defaults = Config{
	Socket:  DefaultSocket,
	Devices: []DeviceConfig{{Name: "udp0", Address: "127.0.0.1", XDP: "auto"}},
	Limits:  Limits{MaxClients: 1024, MaxQPs: 4096, MaxCQs: 4096, MaxMRs: 65536, MaxMemory: "64G"},
	Poll:    Poll{Spin: Duration(time.Millisecond), MaxSleep: Duration(time.Millisecond)},
}

func TestConfigDefaults(t *testing.T) {
	t.Setenv("IBEX_UDP_ADDR", "")
	if got := DefaultConfig(); !reflect.DeepEqual(got, defaults) {
		t.Errorf("DefaultConfig:\n got %+v\nwant %+v", got, defaults)
	}
	for _, data := range []string{"", "# nothing but comments\n", "{}\n", "devices: []\n"} {
		got, err := ParseConfig([]byte(data))
		if err != nil {
			t.Errorf("ParseConfig(%q): %v", data, err)
			continue
		}
		if !reflect.DeepEqual(got, defaults) {
			t.Errorf("ParseConfig(%q):\n got %+v\nwant %+v", data, got, defaults)
		}
	}
	var c Config
	if err := c.Validate(); err != nil || !reflect.DeepEqual(c, defaults) {
		t.Errorf("Validate of the zero Config: %v, %+v", err, c)
	}
	if got, want := defaults.MaxMemoryBytes(), uint64(64<<30); got != want {
		t.Errorf("MaxMemoryBytes = %d, want %d", got, want)
	}
	if got, want := (Config{}).MaxMemoryBytes(), uint64(64<<30); got != want {
		t.Errorf("MaxMemoryBytes of the zero Config = %d, want the default %d", got, want)
	}
	if got, want := defaults.Devices[0].AddrPort(), netip.MustParseAddrPort("127.0.0.1:4791"); got != want {
		t.Errorf("AddrPort = %v, want %v", got, want)
	}
}

func TestConfigDefaultDeviceFromEnv(t *testing.T) {
	t.Setenv("IBEX_UDP_ADDR", "10.1.2.3:5000")
	want := []DeviceConfig{{Name: "udp0", Address: "10.1.2.3:5000", XDP: "auto"}}
	if got := DefaultConfig().Devices; !reflect.DeepEqual(got, want) {
		t.Errorf("DefaultConfig().Devices = %+v, want %+v", got, want)
	}
	c, err := ParseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Devices[0].AddrPort(), netip.MustParseAddrPort("10.1.2.3:5000"); got != want {
		t.Errorf("AddrPort = %v, want %v", got, want)
	}
	// A file's devices replace the default device and its address.
	c, err = ParseConfig([]byte("devices: [{name: udp1, address: 10.9.9.9}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Devices) != 1 || c.Devices[0].Name != "udp1" {
		t.Errorf("devices = %+v, want udp1 alone", c.Devices)
	}

	t.Setenv("IBEX_UDP_ADDR", "not-an-address")
	_, err = ParseConfig(nil)
	checkConfigErr(t, err, "devices: ", `"not-an-address" is not an IP address`, "IBEX_UDP_ADDR")
	// DefaultConfig cannot fail, so it falls back as provider/udp does.
	if got := DefaultConfig(); !reflect.DeepEqual(got, defaults) {
		t.Errorf("DefaultConfig with a bad IBEX_UDP_ADDR:\n got %+v\nwant %+v", got, defaults)
	}
}

// fullConfig gives every field; its cores are CPUs this test may run on.
func fullConfig(t *testing.T) (string, Config) {
	cpus := allowedCPUs()
	cores := cpus[:min(2, len(cpus))]
	var list []string
	for _, c := range cores {
		list = append(list, fmt.Sprint(c))
	}
	data := `# every field
socket: /tmp/ibex/test.sock
cores: [` + strings.Join(list, ", ") + `]
devices:
  - name: udp0
    address: 10.0.0.1
    xdp: "on"
  - name: udp1
    address: "[fd00::1]:4792"
    xdp: off
  - name: udp7
    address: 192.168.1.5:4791
limits:
  max_clients: 16
  max_qps: 100
  max_cqs: 200
  max_mrs: 300
  max_memory: 2G
poll:
  spin: 20us
  max_sleep: 500us
`
	want := Config{
		Socket: "/tmp/ibex/test.sock",
		Cores:  cores,
		Devices: []DeviceConfig{
			{Name: "udp0", Address: "10.0.0.1", XDP: "on"},
			{Name: "udp1", Address: "[fd00::1]:4792", XDP: "off"},
			{Name: "udp7", Address: "192.168.1.5:4791", XDP: "auto"},
		},
		Limits: Limits{MaxClients: 16, MaxQPs: 100, MaxCQs: 200, MaxMRs: 300, MaxMemory: "2G"},
		Poll:   Poll{Spin: Duration(20 * time.Microsecond), MaxSleep: Duration(500 * time.Microsecond)},
	}
	return data, want
}

func TestConfigFull(t *testing.T) {
	data, want := fullConfig(t)
	got, err := ParseConfig([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseConfig:\n got %+v\nwant %+v", got, want)
	}
	if n := got.MaxMemoryBytes(); n != 2<<30 {
		t.Errorf("MaxMemoryBytes = %d, want %d", n, 2<<30)
	}
	for i, a := range []string{"10.0.0.1:4791", "[fd00::1]:4792", "192.168.1.5:4791"} {
		if got, want := got.Devices[i].AddrPort(), netip.MustParseAddrPort(a); got != want {
			t.Errorf("devices[%d].AddrPort = %v, want %v", i, got, want)
		}
	}

	// Validate again changes nothing: a validated Config stays valid.
	again := got
	again.Devices = append([]DeviceConfig(nil), got.Devices...)
	if err := again.Validate(); err != nil || !reflect.DeepEqual(again, want) {
		t.Errorf("second Validate: %v, %+v", err, again)
	}

	// Marshalled, the config reads back as itself: durations are written
	// as text, not nanoseconds.
	out, err := yaml.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "spin: 20µs") {
		t.Errorf("marshalled spin is not duration text:\n%s", out)
	}
	back, err := ParseConfig(out)
	if err != nil {
		t.Fatalf("ParseConfig of\n%s: %v", out, err)
	}
	if !reflect.DeepEqual(back, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, want)
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	data, want := fullConfig(t)
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("limits:\n  max_qps: -1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := LoadConfig(good)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("LoadConfig: %v, %+v", err, got)
	}
	_, err = LoadConfig(bad)
	checkConfigErr(t, err, bad+": limits.max_qps: ", "-1 must not be negative", "(line 2)")

	missing := filepath.Join(dir, "missing.yaml")
	_, err = LoadConfig(missing)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(fmt.Sprint(err), missing) {
		t.Errorf("LoadConfig(%s) = %v, want a not-exist error naming the file", missing, err)
	}
}

// TestConfigErrors checks that each value ParseConfig refuses comes back
// naming its field's path and line, and saying what is wrong with it.
func TestConfigErrors(t *testing.T) {
	t.Setenv("IBEX_UDP_ADDR", "")
	cpus := allowedCPUs()
	cpuList := cpuRanges(cpus)
	free := cpus[len(cpus)-1] + 1 // a CPU this process may not run on
	for _, c := range []struct {
		name, yml string
		want      []string // the error contains each
	}{
		{"relative socket", "socket: ibexd.sock\n",
			[]string{"socket: ", `"ibexd.sock" is not an absolute path`, "(line 1)"}},
		{"long socket", "socket: /" + strings.Repeat("s", 107) + "\n",
			[]string{"socket: ", "108 bytes long", "at most 107", "(line 1)"}},
		{"negative core", "cores: [-1]\n",
			[]string{"cores[0]: ", "-1 is not a CPU this process may run on (" + cpuList + ")", "(line 1)"}},
		{"absent core", fmt.Sprintf("cores:\n  - %d\n  - %d\n", cpus[0], free),
			[]string{"cores[1]: ", fmt.Sprintf("%d is not a CPU", free), "(line 3)"}},
		{"duplicate core", fmt.Sprintf("cores: [%d, %d]\n", cpus[0], cpus[0]),
			[]string{"cores[1]: ", fmt.Sprintf("%d is given twice (also cores[0])", cpus[0]), "(line 1)"}},
		{"core not a number", "cores: [one]\n",
			[]string{"cores[0]: ", "one: want an integer", "(line 1)"}},
		{"cores not a list", "cores: 3\n",
			[]string{"cores: ", "want a list", "(line 1)"}},

		{"missing name", "devices:\n  - address: 10.0.0.1\n",
			[]string{"devices[0].name: ", "missing; want udpN", "(line 2)"}},
		{"bad name", "devices:\n  - name: eth0\n    address: 10.0.0.1\n",
			[]string{"devices[0].name: ", `"eth0" is not udpN`, "(line 2)"}},
		{"name without number", "devices:\n  - name: udp\n    address: 10.0.0.1\n",
			[]string{"devices[0].name: ", `"udp" is not udpN`}},
		{"name with suffix", "devices:\n  - name: udp0x\n    address: 10.0.0.1\n",
			[]string{"devices[0].name: ", `"udp0x" is not udpN`}},
		{"duplicate name", "devices:\n  - {name: udp0, address: 10.0.0.1}\n  - {name: udp0, address: 10.0.0.2}\n",
			[]string{"devices[1].name: ", `"udp0" is also the name of devices[0]`, "(line 3)"}},

		{"missing address", "devices:\n  - name: udp0\n",
			[]string{"devices[0].address: ", "missing; want an IP address", "(line 2)"}},
		{"bad IPv4", "devices:\n  - {name: udp0, address: 10.0.0.1}\n  - name: udp1\n    address: 10.0.0.300\n",
			[]string{"devices[1].address: ", `"10.0.0.300" is not an IP address`, "(line 4)"}},
		{"host name", "devices:\n  - {name: udp0, address: node1.example}\n",
			[]string{"devices[0].address: ", `"node1.example" is not an IP address`, "(line 2)"}},
		{"bad port", "devices:\n  - {name: udp0, address: \"10.0.0.1:99999\"}\n",
			[]string{"devices[0].address: ", `"10.0.0.1:99999" has port "99999"; want a port in 1..65535`}},
		{"port 0", "devices:\n  - {name: udp0, address: \"[fd00::1]:0\"}\n",
			[]string{"devices[0].address: ", "has port 0", "or none for 4791"}},
		{"unspecified IPv4", "devices:\n  - {name: udp0, address: 0.0.0.0}\n",
			[]string{"devices[0].address: ", `"0.0.0.0" is not an address of one interface`}},
		{"unspecified IPv6", "devices:\n  - {name: udp0, address: \"::\"}\n",
			[]string{"devices[0].address: ", `"::" is not an address of one interface`}},
		{"multicast", "devices:\n  - {name: udp0, address: 224.0.0.1}\n",
			[]string{"devices[0].address: ", `"224.0.0.1" is not an address of one interface`}},
		// Another port does not make another GID.
		{"duplicate address", "devices:\n  - {name: udp0, address: 10.0.0.1}\n  - {name: udp1, address: \"10.0.0.1:4792\"}\n",
			[]string{"devices[1].address: ", `"10.0.0.1:4792" is the address of devices[0] too`, "(line 3)"}},
		{"duplicate mapped address", "devices:\n  - {name: udp0, address: 10.0.0.1}\n  - {name: udp1, address: \"::ffff:10.0.0.1\"}\n",
			[]string{"devices[1].address: ", "is the address of devices[0] too"}},

		{"bad xdp", "devices:\n  - name: udp0\n    address: 10.0.0.1\n    xdp: yes\n",
			[]string{"devices[0].xdp: ", `"yes" is not auto, on or off`, "(line 4)"}},
		{"xdp bool", "devices:\n  - {name: udp0, address: 10.0.0.1, xdp: true}\n",
			[]string{"devices[0].xdp: ", `"true" is not auto, on or off`}},
		{"xdp upper case", "devices:\n  - {name: udp0, address: 10.0.0.1, xdp: ON}\n",
			[]string{"devices[0].xdp: ", `"ON" is not auto, on or off`}},
		{"devices not a list", "devices: udp0\n",
			[]string{"devices: ", "udp0: want a list", "(line 1)"}},

		{"negative max_clients", "limits:\n  max_clients: -1\n",
			[]string{"limits.max_clients: ", "-1 must not be negative (0 or absent means the default, 1024)", "(line 2)"}},
		{"negative max_qps", "limits:\n  max_qps: -2\n",
			[]string{"limits.max_qps: ", "-2 must not be negative (0 or absent means the default, 4096)", "(line 2)"}},
		{"negative max_cqs", "limits:\n  max_cqs: -3\n",
			[]string{"limits.max_cqs: ", "-3 must not be negative", "(line 2)"}},
		{"negative max_mrs", "limits:\n  max_mrs: -4\n",
			[]string{"limits.max_mrs: ", "-4 must not be negative (0 or absent means the default, 65536)", "(line 2)"}},
		{"max_qps not a number", "limits:\n  max_qps: many\n",
			[]string{"limits.max_qps: ", "many: want an integer", "(line 2)"}},
		{"bad max_memory suffix", "limits:\n  max_memory: 64X\n",
			[]string{"limits.max_memory: ", `"64X": want a size in bytes like 8, 64K, 128M, 16G`, "(line 2)"}},
		{"negative max_memory", "limits:\n  max_memory: -1G\n",
			[]string{"limits.max_memory: ", `"-1G": want a size in bytes`}},
		{"zero max_memory", "limits:\n  max_memory: 0\n",
			[]string{"limits.max_memory: ", `"0" would let no process register any memory`, "(line 2)"}},
		{"limits not a mapping", "limits: [1]\n",
			[]string{"limits: ", "a list: want a mapping", "(line 1)"}},

		{"negative spin", "poll:\n  spin: -5us\n",
			[]string{"poll.spin: ", "-5µs must not be negative (0 or absent means the default, 1ms)", "(line 2)"}},
		{"negative max_sleep", "poll:\n  max_sleep: -1ms\n",
			[]string{"poll.max_sleep: ", "-1ms must not be negative (0 or absent means the default, 1ms)", "(line 2)"}},
		// A bare number has no unit to read it in.
		{"spin without unit", "poll:\n  spin: 50\n",
			[]string{"poll.spin: ", "50: want a duration such as 50us or 1ms", "(line 2)"}},
		{"spin not a duration", "poll: {max_sleep: soon}\n",
			[]string{"poll.max_sleep: ", "soon: want a duration such as 50us or 1ms", "(line 1)"}},

		{"unknown field", "socket: /run/x.sock\nsokcet: /run/y.sock\n",
			[]string{"sokcet: ", "unknown field; known fields are socket, cores, devices, limits, poll", "(line 2)"}},
		{"unknown device field", "devices:\n  - name: udp0\n    address: 10.0.0.1\n    port: 4791\n",
			[]string{"devices[0].port: ", "unknown field; known fields are name, address, xdp", "(line 4)"}},
		{"unknown limit", "limits:\n  max_pds: 3\n",
			[]string{"limits.max_pds: ", "unknown field; known fields are max_clients, max_qps, max_cqs, max_mrs, max_memory", "(line 2)"}},
		{"unknown poll field", "poll:\n  spin: 1us\n  sleep: 1ms\n",
			[]string{"poll.sleep: ", "unknown field; known fields are spin, max_sleep", "(line 3)"}},

		{"syntax", "limits: {max_qps: 1\n", []string{"did not find expected"}},
		{"two documents", "socket: /a.sock\n---\nsocket: /b.sock\n", []string{"more than one YAML document; want one config per file"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.yml))
			checkConfigErr(t, err, c.want...)
		})
	}
}

// TestConfigErrorsAll checks that every mistake of a file is reported,
// each on a line of its own, rather than the first alone.
func TestConfigErrorsAll(t *testing.T) {
	_, err := ParseConfig([]byte("socket: x\ndevices:\n  - {name: eth0, address: 10.0.0.300, xdp: maybe}\npoll: {spin: -1s}\n"))
	checkConfigErr(t, err, "socket: ", "devices[0].name: ", "devices[0].address: ", "devices[0].xdp: ", "poll.spin: ")
	if n := strings.Count(err.Error(), "\n"); n != 4 {
		t.Errorf("%d lines, want 5:\n%v", n+1, err)
	}
}

// TestValidateInCode checks a Config made in Go: the errors name the
// field as a file would, with no line to give.
func TestValidateInCode(t *testing.T) {
	c := Config{
		Cores:   []int{-1},
		Devices: []DeviceConfig{{Name: "udp0", Address: "10.0.0.300"}},
		Limits:  Limits{MaxMRs: -1},
		Poll:    Poll{MaxSleep: Duration(-time.Millisecond)},
	}
	err := c.Validate()
	checkConfigErr(t, err, "cores[0]: -1 is not a CPU", `devices[0].address: "10.0.0.300" is not an IP address`,
		"limits.max_mrs: -1 must not be negative", "poll.max_sleep: -1ms must not be negative")
	if strings.Contains(err.Error(), "(line") {
		t.Errorf("error of a Config made in Go gives a line: %v", err)
	}
	// The fields that are right got their defaults all the same.
	if c.Socket != DefaultSocket || c.Devices[0].XDP != "auto" || c.Limits.MaxQPs != 4096 || c.Poll.Spin != Duration(time.Millisecond) {
		t.Errorf("defaults not filled: %+v", c)
	}
}

func TestAddrPort(t *testing.T) {
	for _, c := range []struct{ addr, want string }{
		{"10.0.0.1", "10.0.0.1:4791"},
		{"10.0.0.1:5000", "10.0.0.1:5000"},
		{"fd00::1", "[fd00::1]:4791"},
		{"[fd00::1]", "[fd00::1]:4791"},
		{"[fd00::1]:5000", "[fd00::1]:5000"},
		{"fe80::1%eth0", "[fe80::1%eth0]:4791"},
		{"[fe80::1%eth0]:5000", "[fe80::1%eth0]:5000"},
	} {
		d := DeviceConfig{Name: "udp0", Address: c.addr}
		if got, want := d.AddrPort(), netip.MustParseAddrPort(c.want); got != want {
			t.Errorf("AddrPort(%q) = %v, want %v", c.addr, got, want)
		}
		cfg := Config{Devices: []DeviceConfig{d}}
		if err := cfg.Validate(); err != nil {
			t.Errorf("Validate of address %q: %v", c.addr, err)
		}
	}
	for _, bad := range []string{"", "10.0.0.300", "[fd00::1", "fd00::1]", "10.0.0.1:0"} {
		if a := (DeviceConfig{Address: bad}).AddrPort(); a.IsValid() {
			t.Errorf("AddrPort(%q) = %v, want the zero AddrPort", bad, a)
		}
	}
}

func TestMaxMemoryBytes(t *testing.T) {
	for _, c := range []struct {
		s    string
		want uint64
	}{{"", 64 << 30}, {"4096", 4096}, {"512k", 512 << 10}, {"1T", 1 << 40}, {"lots", 0}} {
		cfg := Config{Limits: Limits{MaxMemory: c.s}}
		if got := cfg.MaxMemoryBytes(); got != c.want {
			t.Errorf("MaxMemoryBytes(%q) = %d, want %d", c.s, got, c.want)
		}
	}
}

func TestDurationText(t *testing.T) {
	var d Duration
	if err := d.UnmarshalText([]byte("50us")); err != nil || d != Duration(50*time.Microsecond) {
		t.Errorf("UnmarshalText(50us) = %v, %v", d, err)
	}
	if b, err := d.MarshalText(); err != nil || string(b) != "50µs" {
		t.Errorf("MarshalText = %q, %v; want 50µs", b, err)
	}
	if err := d.UnmarshalText([]byte("50")); err == nil || !strings.Contains(err.Error(), `"50" is not a duration`) {
		t.Errorf("UnmarshalText(50) = %v, want an error naming the value", err)
	}
}

func TestCPURanges(t *testing.T) {
	for _, c := range []struct {
		cpus []int
		want string
	}{
		{nil, "none"},
		{[]int{0}, "0"},
		{[]int{0, 1}, "0..1"},
		{[]int{0, 1, 2, 3, 8, 9, 10, 11, 14}, "0..3, 8..11, 14"},
		{[]int{1, 3, 5}, "1, 3, 5"},
	} {
		if got := cpuRanges(c.cpus); got != c.want {
			t.Errorf("cpuRanges(%v) = %q, want %q", c.cpus, got, c.want)
		}
	}
	if len(allowedCPUs()) == 0 {
		t.Error("allowedCPUs is empty: this process runs on some CPU")
	}
}

// TestConfigFileMirrorsConfig checks that configFile, which a file
// decodes into, has Config's fields: a field added to one alone would be
// refused in files, or silently dropped.
func TestConfigFileMirrorsConfig(t *testing.T) {
	check := func(a, b reflect.Type) {
		t.Helper()
		if a.NumField() != b.NumField() {
			t.Fatalf("%v has %d fields, %v %d", a, a.NumField(), b, b.NumField())
		}
		for i := range a.NumField() {
			fa, fb := a.Field(i), b.Field(i)
			if fa.Name != fb.Name || fa.Tag != fb.Tag {
				t.Errorf("%v field %d is %s `%s`, %v has %s `%s`", a, i, fa.Name, fa.Tag, b, fb.Name, fb.Tag)
			}
		}
	}
	check(reflect.TypeFor[Config](), reflect.TypeFor[configFile]())
	check(reflect.TypeFor[Poll](), reflect.TypeFor[pollFile]())
}

// checkConfigErr fails t unless err wraps ErrConfig and contains each of
// want.
func checkConfigErr(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("no error; want one containing %q", want)
		return
	}
	if !errors.Is(err, ErrConfig) {
		t.Errorf("error does not wrap ErrConfig: %v", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not contain %q:\n%v", w, err)
		}
	}
}
