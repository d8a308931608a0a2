package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/internal/partitions"
	"github.com/ibex-rdma/ibex/internal/units"
	"github.com/ibex-rdma/ibex/internal/yamlfield"
	"github.com/ibex-rdma/ibex/wire"
)

// Config is ibexd's configuration (ibex daemon --config FILE). The zero
// value of every field is its documented default.
type Config struct {
	Socket  string         `yaml:"socket"`  // unix socket path; default DefaultSocket
	Cores   []int          `yaml:"cores"`   // CPUs the daemon's threads are pinned to; empty: all
	Devices []DeviceConfig `yaml:"devices"` // default: one device udp0 on 127.0.0.1 (IBEX_UDP_ADDR's value if set)
	Limits  Limits         `yaml:"limits"`
	Poll    Poll           `yaml:"poll"`
	Metrics string         `yaml:"metrics"` // host:port to serve Prometheus's /metrics on (metrics.go); default "": none
	// Tenants map attaching processes to tenants (tenantconfig.go); none:
	// every process is in one implicit tenant with no quotas beyond Limits.
	Tenants []TenantConfig `yaml:"tenants,omitempty"`
	// DefaultTenant names the tenant of processes no tenant matches;
	// default "": such a process is refused at attach.
	DefaultTenant string `yaml:"default_tenant,omitempty"`
	// Partitions is a partitions.conf (opensm's syntax, internal/partitions)
	// that gives each device's port its P_Key table: the partitions whose
	// members include the device's address or GUID. Default "": every port
	// is a full member of the default partition only.
	Partitions string `yaml:"partitions"`
}

// DeviceConfig is one network device ibexd owns: a RoCEv2 device of
// provider/udp.
type DeviceConfig struct {
	Name    string `yaml:"name"`    // udpN (udp0, udp1, ...): required, unique, must match ^udp[0-9]+$
	Address string `yaml:"address"` // IPv4 or IPv6 address, optionally with :port (default port 4791); required
	XDP     string `yaml:"xdp"`     // "auto" (default), "on" or "off": as IBEX_UDP_XDP
	PSP     string `yaml:"psp"`     // encryption: "off", "on" or "required"; default "": IBEX_PSP's, else off
	PSPKey  string `yaml:"psp_key"` // the cluster's master key file (package psp), needed unless psp is off: as IBEX_PSP_KEY
}

// Limits bound what one attached process may hold, so that one process
// cannot take the daemon's memory or the devices' resources from the rest.
type Limits struct {
	MaxClients int    `yaml:"max_clients"` // attached processes; default 1024
	MaxQPs     int    `yaml:"max_qps"`     // QPs per process; default 4096
	MaxCQs     int    `yaml:"max_cqs"`     // CQs per process; default 4096
	MaxMRs     int    `yaml:"max_mrs"`     // MRs per process; default 65536
	MaxMemory  string `yaml:"max_memory"`  // registered bytes per process, with K/M/G/T suffix (internal/units); default "64G"
}

// Poll is how the daemon's engines wait for work: spinning costs a CPU
// but answers in nanoseconds, sleeping frees the CPU but adds the sleep
// to the latency of the first packet after it.
type Poll struct {
	Spin     Duration `yaml:"spin"`      // busy-poll this long with no work before sleeping; default 1ms
	MaxSleep Duration `yaml:"max_sleep"` // longest sleep of an idle engine; default 1ms
}

// Duration is a time.Duration in YAML as Go's duration text ("50us", "1ms").
type Duration time.Duration

// String is Go's duration text ("50µs"), which ParseConfig reads back.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes d as String does, so that a Config marshalled to
// YAML or JSON reads as a file would give it rather than in nanoseconds.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads Go's duration text. ParseConfig does not need it
// (see configFile); it is the inverse of MarshalText for other encodings.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		return fmt.Errorf("%q is not a duration such as 50us or 1ms", text)
	}
	*d = Duration(v)
	return nil
}

// DefaultSocket is where ibexd listens when the config does not say.
const DefaultSocket = "/run/ibex/ibexd.sock"

// ErrConfig is wrapped by every error about a config's content.
var ErrConfig = errors.New("invalid daemon config")

// The defaults of the zero fields.
const (
	defaultDevice     = "udp0"
	defaultAddress    = "127.0.0.1"
	defaultXDP        = "auto"
	defaultMaxClients = 1024
	defaultMaxQPs     = 4096
	defaultMaxCQs     = 4096
	defaultMaxMRs     = 65536
	defaultMaxMemory  = "64G"
	defaultSpin       = Duration(1 * time.Millisecond)
	defaultMaxSleep   = Duration(time.Millisecond)
)

// maxSocketPath is the longest unix socket path: sun_path holds 108
// bytes, and C clients need one of them for the terminating NUL.
const maxSocketPath = 107

// deviceName is what provider/udp's devices are called, so that ibexd's
// names are the ones applications already open.
var deviceName = regexp.MustCompile(`^udp[0-9]+$`)

// ParseConfig decodes a config file and validates it, filling the
// defaults. A file with no YAML document in it (empty, or comments only)
// is the default config. Unknown fields and values of the wrong type are
// errors naming the field's path and line; so are values Validate
// refuses. Every error wraps ErrConfig.
func ParseConfig(data []byte) (Config, error) {
	var f configFile
	lines, err := configSchema.Decode(data, &f)
	if err != nil && !errors.Is(err, yamlfield.ErrEmpty) {
		return Config{}, err
	}
	c := f.config()
	if err := c.validate(lines); err != nil {
		return Config{}, err
	}
	return c, nil
}

// LoadConfig reads and parses the config file at path. Its errors start
// with the path; those about the content wrap ErrConfig, those about
// reading the file are os errors (fs.ErrNotExist, ...).
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// DefaultConfig is the config of an empty file. If IBEX_UDP_ADDR is set
// but is not an address, its device is on 127.0.0.1, as provider/udp
// does then too; ParseConfig and Validate report the bad value instead.
func DefaultConfig() Config {
	var c Config
	if err := c.Validate(); err == nil {
		return c
	}
	c = Config{Devices: []DeviceConfig{{Name: defaultDevice, Address: defaultAddress}}}
	if err := c.Validate(); err != nil {
		panic("daemon: the default config is invalid: " + err.Error())
	}
	return c
}

// Validate checks c and fills its defaults in place. Its errors name the
// field's path ("devices[1].address"), say what is wrong with the value
// and wrap ErrConfig; all of them are returned, joined.
func (c *Config) Validate() error { return c.validate(nil) }

// MaxMemoryBytes is Limits.MaxMemory in bytes: the default when it is
// empty, 0 when it is not a size (which Validate refuses).
func (c Config) MaxMemoryBytes() uint64 {
	s := c.Limits.MaxMemory
	if s == "" {
		s = defaultMaxMemory
	}
	n, err := units.ParseBytes(s)
	if err != nil {
		return 0
	}
	return uint64(n)
}

// AddrPort is the device's address with the port filled (4791 when the
// address gives none); the zero AddrPort when Address is not one (which
// Validate refuses).
func (d DeviceConfig) AddrPort() netip.AddrPort {
	a, _ := parseAddress(d.Address)
	return a
}

// validate is Validate; lines, when the config came from a file, gives
// the line of each field path for the errors.
func (c *Config) validate(lines map[string]int) error {
	v := &validator{lines: lines}
	if c.Socket == "" {
		c.Socket = DefaultSocket
	}
	switch {
	case !filepath.IsAbs(c.Socket):
		// Clients are started in directories of their own.
		v.bad("socket", "%q is not an absolute path; clients in other directories would not find it", c.Socket)
	case len(c.Socket) > maxSocketPath:
		v.bad("socket", "%q is %d bytes long; a unix socket path has at most %d", c.Socket, len(c.Socket), maxSocketPath)
	}
	c.validateCores(v)
	c.validateDevices(v)
	c.validateLimits(v)
	v.duration("poll.spin", &c.Poll.Spin, defaultSpin)
	v.duration("poll.max_sleep", &c.Poll.MaxSleep, defaultMaxSleep)
	validateMetrics(v, c.Metrics)
	c.validateTenants(v)
	if c.Partitions != "" {
		for _, d := range c.Devices {
			if _, err := c.PKeys(d); err != nil {
				v.bad("partitions", "%v", err)
				break
			}
		}
	}
	return errors.Join(v.errs...)
}

// PKeys is device d's P_Key table from the Partitions file (nil without
// one: the default table).
func (c *Config) PKeys(d DeviceConfig) ([]uint16, error) {
	if c.Partitions == "" {
		return nil, nil
	}
	p, err := partitions.ReadFile(c.Partitions)
	if err != nil {
		return nil, err
	}
	return p.Table(partitions.Port{Addr: d.AddrPort().Addr()})
}

func (c *Config) validateCores(v *validator) {
	if len(c.Cores) == 0 {
		return
	}
	allowed := allowedCPUs()
	ok := make(map[int]bool, len(allowed))
	for _, cpu := range allowed {
		ok[cpu] = true
	}
	first := make(map[int]int, len(c.Cores))
	for i, cpu := range c.Cores {
		field := fmt.Sprintf("cores[%d]", i)
		if !ok[cpu] {
			v.bad(field, "%d is not a CPU this process may run on (%s)", cpu, cpuRanges(allowed))
			continue
		}
		if j, dup := first[cpu]; dup {
			v.bad(field, "%d is given twice (also cores[%d])", cpu, j)
			continue
		}
		first[cpu] = i
	}
}

func (c *Config) validateDevices(v *validator) {
	if len(c.Devices) == 0 {
		d := DeviceConfig{Name: defaultDevice, Address: defaultAddress, XDP: defaultXDP}
		if s := os.Getenv("IBEX_UDP_ADDR"); s != "" {
			if _, msg := parseAddress(s); msg != "" {
				// The file gives no devices, so the environment is what is wrong.
				v.bad("devices", "none given, and the default device %s takes its address from IBEX_UDP_ADDR, where %s", defaultDevice, msg)
				return
			}
			d.Address = s
		}
		c.Devices = []DeviceConfig{d}
		return
	}
	names := make(map[string]int, len(c.Devices))
	addrs := make(map[netip.Addr]int, len(c.Devices))
	for i := range c.Devices {
		d := &c.Devices[i]
		at := fmt.Sprintf("devices[%d].", i)
		switch j, dup := names[d.Name]; {
		case d.Name == "":
			v.bad(at+"name", "missing; want udpN (udp0, udp1, ...)")
		case !deviceName.MatchString(d.Name):
			v.bad(at+"name", "%q is not udpN (udp0, udp1, ...)", d.Name)
		case dup:
			v.bad(at+"name", "%q is also the name of devices[%d]", d.Name, j)
		default:
			names[d.Name] = i
		}

		if d.Address == "" {
			v.bad(at+"address", "missing; want an IP address, optionally with :port")
		} else if a, msg := parseAddress(d.Address); msg != "" {
			v.bad(at+"address", "%s", msg)
		} else {
			// A GID names only the address (provider/udp), so peers
			// could not tell two devices on one address apart.
			ip := a.Addr().Unmap().WithZone("")
			if j, dup := addrs[ip]; dup {
				v.bad(at+"address", "%q is the address of devices[%d] too; each device needs an address of its own", d.Address, j)
			} else {
				addrs[ip] = i
			}
		}

		switch d.XDP {
		case "":
			d.XDP = defaultXDP
		case "auto", "on", "off":
		default:
			v.bad(at+"xdp", "%q is not auto, on or off", d.XDP)
		}
		switch d.PSP {
		case "", "off":
		case "on", "required":
			if d.PSPKey == "" {
				v.bad(at+"psp_key", "missing: psp %s needs the cluster's master key file", d.PSP)
			}
		default:
			v.bad(at+"psp", "%q is not off, on or required", d.PSP)
		}
	}
}

func (c *Config) validateLimits(v *validator) {
	l := &c.Limits
	v.count("limits.max_clients", &l.MaxClients, defaultMaxClients)
	v.count("limits.max_qps", &l.MaxQPs, defaultMaxQPs)
	v.count("limits.max_cqs", &l.MaxCQs, defaultMaxCQs)
	v.count("limits.max_mrs", &l.MaxMRs, defaultMaxMRs)
	if l.MaxMemory == "" {
		l.MaxMemory = defaultMaxMemory
	}
	switch n, err := units.ParseBytes(l.MaxMemory); {
	case err != nil:
		v.bad("limits.max_memory", "%q: %v", l.MaxMemory, err)
	case n == 0:
		// 0 cannot mean the default here: that is an empty field.
		v.bad("limits.max_memory", "%q would let no process register any memory; want a size like 64G", l.MaxMemory)
	}
}

// parseAddress reads a device address as provider/udp's IBEX_UDP_ADDR
// takes it: an IP address, or an IP address and port. msg says what is
// wrong when it is not one a device can bind.
func parseAddress(s string) (a netip.AddrPort, msg string) {
	bare := s
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		bare = s[1 : len(s)-1] // an IPv6 address in brackets, without a port
	}
	if ip, err := netip.ParseAddr(bare); err == nil {
		a = netip.AddrPortFrom(ip, wire.UDPPort)
	} else if a, err = netip.ParseAddrPort(s); err != nil {
		host, port, splitErr := net.SplitHostPort(s)
		if _, hostErr := netip.ParseAddr(host); splitErr == nil && hostErr == nil {
			return netip.AddrPort{}, fmt.Sprintf("%q has port %q; want a port in 1..65535", s, port)
		}
		return netip.AddrPort{}, fmt.Sprintf("%q is not an IP address", s)
	}
	switch ip := a.Addr(); {
	case a.Port() == 0:
		// provider/udp would take 0 as 4791; a file that says 0 likely
		// means something else (any free port), which peers cannot find.
		return netip.AddrPort{}, fmt.Sprintf("%q has port 0; want a port in 1..65535, or none for %d", s, wire.UDPPort)
	case ip.IsUnspecified() || ip.IsMulticast():
		// The address is also the device's GID, so it must be one that
		// peers can send to.
		return netip.AddrPort{}, fmt.Sprintf("%q is not an address of one interface; want the address peers reach this host at", s)
	}
	return a, ""
}

// allowedCPUs lists the CPUs this process may run on, in order: fewer
// than the machine has when taskset or a container's cpuset confines it,
// and pinning a thread to any other fails. The main thread's set is the
// one the process started with; other threads may have been pinned.
func allowedCPUs() []int {
	for n := 1024; n <= 1<<20; n *= 2 {
		set := unix.NewCPUSet(n)
		err := unix.SchedGetaffinityDynamic(os.Getpid(), set)
		if errors.Is(err, unix.EINVAL) {
			continue // the kernel's mask is bigger than n CPUs
		}
		if err != nil {
			break
		}
		cpus := make([]int, 0, set.Count())
		for cpu := 0; len(cpus) < cap(cpus); cpu++ {
			if set.IsSet(cpu) {
				cpus = append(cpus, cpu)
			}
		}
		return cpus
	}
	cpus := make([]int, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = i
	}
	return cpus
}

// cpuRanges prints sorted CPUs as ranges: "0..3, 8..11, 14".
func cpuRanges(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteString("..")
			b.WriteString(strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// validator collects the errors of one Validate.
type validator struct {
	lines map[string]int
	errs  []error
}

func (v *validator) bad(field, format string, args ...any) {
	v.errs = append(v.errs, &fieldError{field: field, msg: fmt.Sprintf(format, args...), line: v.line(field)})
}

// line is the line of field in the file, or of the nearest enclosing
// value the file gives when it leaves field out ("devices[2]" for a
// missing "devices[2].name"); 0 when the config is not from a file.
func (v *validator) line(field string) int {
	for p := field; p != ""; {
		if l, ok := v.lines[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

// count fills a zero limit with its default and refuses a negative one.
func (v *validator) count(field string, n *int, def int) {
	switch {
	case *n == 0:
		*n = def
	case *n < 0:
		v.bad(field, "%d must not be negative (0 or absent means the default, %d)", *n, def)
	}
}

// duration fills a zero duration with its default and refuses a negative
// one.
func (v *validator) duration(field string, d *Duration, def Duration) {
	switch {
	case *d == 0:
		*d = def
	case *d < 0:
		v.bad(field, "%v must not be negative (0 or absent means the default, %v)", *d, def)
	}
}

// fieldError is one field of a config that ibexd cannot use.
type fieldError struct {
	field string // the path in the file: "devices[1].address"
	msg   string // what is wrong with its value
	line  int    // the line in the file; 0 when unknown
}

func (e *fieldError) Error() string {
	if e.line > 0 {
		return fmt.Sprintf("%s: %s (line %d)", e.field, e.msg, e.line)
	}
	return e.field + ": " + e.msg
}

func (e *fieldError) Unwrap() error { return ErrConfig }

// configFile is Config as a file gives it. Poll's durations decode as
// time.Duration, which yaml reads from duration text and, when that
// fails, reports with the field's path and line. A Duration cannot: yaml
// drops the line of a TextUnmarshaler's error, and a yaml.Unmarshaler
// would mean using yaml here other than through yamlfield.
// TestConfigFileMirrorsConfig keeps the two in step.
type configFile struct {
	Socket        string         `yaml:"socket"`
	Cores         []int          `yaml:"cores"`
	Devices       []DeviceConfig `yaml:"devices"`
	Limits        Limits         `yaml:"limits"`
	Poll          pollFile       `yaml:"poll"`
	Metrics       string         `yaml:"metrics"`
	Tenants       []TenantConfig `yaml:"tenants,omitempty"`
	DefaultTenant string         `yaml:"default_tenant,omitempty"`
	Partitions    string         `yaml:"partitions"`
}

type pollFile struct {
	Spin     time.Duration `yaml:"spin"`
	MaxSleep time.Duration `yaml:"max_sleep"`
}

func (f *configFile) config() Config {
	return Config{
		Socket:  f.Socket,
		Cores:   f.Cores,
		Devices: f.Devices,
		Limits:  f.Limits,
		Poll:    Poll{Spin: Duration(f.Poll.Spin), MaxSleep: Duration(f.Poll.MaxSleep)},
		Metrics: f.Metrics,
		Tenants: f.Tenants, DefaultTenant: f.DefaultTenant,
		Partitions: f.Partitions,
	}
}

// configSchema is how a config file decodes and how its errors read.
var configSchema = yamlfield.Schema{
	What: "config",
	Err:  ErrConfig,
	Field: func(p yamlfield.Problem) error {
		msg := p.Want
		if p.Value != "" {
			msg = p.Value + ": " + p.Want
		}
		return &fieldError{field: p.Field, msg: msg, line: p.Line}
	},
	Types: []reflect.Type{
		reflect.TypeFor[configFile](), reflect.TypeFor[DeviceConfig](),
		reflect.TypeFor[Limits](), reflect.TypeFor[pollFile](),
		reflect.TypeFor[TenantConfig](), reflect.TypeFor[TenantMatch](), reflect.TypeFor[Quotas](),
	},
	Words: map[string]string{
		"time.Duration": "a duration such as 50us or 1ms",
	},
	Mappings: []string{"daemon."},
}
