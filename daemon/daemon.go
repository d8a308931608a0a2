// Package daemon is ibexd: one process per host that owns the network
// devices and runs the RC transport of every process attached to it, as
// an HCA or a DPU does. Its one job is to serve attached processes: their
// control verbs arrive on a unix socket (internal/ibexdwire), their work
// requests and completions travel in rings in shared memory
// (internal/hwq), and their registered memory is memfd memory the daemon
// maps, so the transport reads and writes it with no copy through the
// process and no CPU of the process.
//
// Inside, each attached process gets a verbs.Context on the daemon's own
// device (provider/udp, "udp/udpN"), and each of its PDs, MRs, CQs and QPs
// a daemon-side twin: the daemon's verbs enforces keys, PDs, access and
// bounds, so a process can reach only the memory it registered, and a
// peer only what was registered for remote access. MRs are registered at
// the address the process sees (PD.RegMRIOVA), with keys and QP numbers
// the daemon allocates, so what a process hands its peers is what goes on
// the wire.
//
// One engine per configured core moves the work requests of the
// processes assigned to it from their rings into the daemon's QPs and
// their completions back, busy-polling while there is work and sleeping
// in a futex (woken by a process's doorbell or by a completion) when there
// is none. Every thread of the daemon runs on Config.Cores.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
)

// Daemon is a running ibexd.
type Daemon struct {
	cfg     Config
	ln      *net.UnixListener
	started time.Time
	devs    map[string]*verbs.Context // one context per device keeps it open
	engines []*engine
	tenants map[string]*tenant // by name; fixed after New
	gids    []verbs.GID        // the devices' port GIDs
	// qpTenant maps the number of every QP the daemon serves to its
	// tenant (uint32 -> *tenant): a QP may connect to a QP of this
	// daemon only if it is its own tenant's.
	qpTenant sync.Map

	mu       sync.Mutex
	clients  map[*client]struct{}
	closed   bool
	detached atomic.Uint64
	wg       sync.WaitGroup

	// An upgrade in progress (handover.go): the accept loop waits for
	// its outcome on handedOver (true: exit, the new daemon serves).
	handing    atomic.Bool
	handedOver chan bool
}

// New configures the devices, pins the daemon to its cores and listens on
// the socket. A live daemon already on the socket is an error; a stale
// socket file is replaced.
func New(cfg Config) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.Cores) > 0 {
		if err := pinProcess(cfg.Cores); err != nil {
			return nil, fmt.Errorf("ibexd: cores %v: %w", cfg.Cores, err)
		}
	}
	d := &Daemon{cfg: cfg, started: time.Now(), devs: map[string]*verbs.Context{}, tenants: tenantsOf(&cfg), clients: map[*client]struct{}{}, handedOver: make(chan bool, 1)}
	for i, dc := range cfg.Devices {
		if err := udp.SetDevice(dc.Name, dc.AddrPort(), dc.XDP); err != nil {
			d.closeDevices()
			return nil, fmt.Errorf("ibexd: devices[%d]: %w", i, err)
		}
		if err := udp.SetPSP(dc.Name, dc.PSP, dc.PSPKey); err != nil {
			d.closeDevices()
			return nil, fmt.Errorf("ibexd: devices[%d]: %w", i, err)
		}
		if err := setPKeys(&cfg, dc); err != nil {
			d.closeDevices()
			return nil, fmt.Errorf("ibexd: devices[%d]: %w", i, err)
		}
		c, err := verbs.Open("udp/" + dc.Name)
		if err != nil {
			d.closeDevices()
			return nil, fmt.Errorf("ibexd: devices[%d] %s on %v: %w", i, dc.Name, dc.AddrPort(), err)
		}
		d.devs[dc.Name] = c
		if pa, err := c.QueryPort(1); err == nil {
			d.gids = append(d.gids, pa.GID)
		}
	}
	if err := d.startEngines(); err != nil {
		d.closeDevices()
		return nil, err
	}
	ln, err := listen(cfg.Socket)
	if err != nil {
		d.stopEngines()
		d.closeDevices()
		return nil, err
	}
	d.ln = ln
	return d, nil
}

func listen(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("ibexd: socket %s: %w", path, err)
	}
	if _, err := os.Stat(path); err == nil {
		c, err := net.DialTimeout("unixpacket", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("ibexd: socket %s: another ibexd is serving it", path)
		}
		// Nobody answers: a daemon that died left it behind.
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("ibexd: socket %s: removing the stale socket: %w", path, err)
		}
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("ibexd: listen on %s: %w", path, err)
	}
	// Any local user may attach: what a process can reach is bounded by
	// what it registers, and the trust zone (tenants) is a later layer.
	_ = os.Chmod(path, 0o666)
	return ln, nil
}

// Socket is the path the daemon listens on.
func (d *Daemon) Socket() string { return d.cfg.Socket }

// Serve accepts processes until ctx ends, then detaches every process,
// closes the devices and removes the socket.
func (d *Daemon) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { d.ln.Close() })
	defer stop()
	var err error
	for {
		conn, aerr := d.ln.AcceptUnix()
		if aerr != nil && d.handing.Load() && ctx.Err() == nil {
			if <-d.handedOver {
				// The new daemon serves the socket, the devices and
				// every process: leave without touching them.
				return nil
			}
			d.handing.Store(false)
			_ = d.ln.SetDeadline(time.Time{})
			continue
		}
		if aerr != nil {
			if ctx.Err() == nil {
				err = fmt.Errorf("ibexd: accept: %w", aerr)
			}
			break
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			conn.Close()
			break
		}
		d.wg.Add(1)
		d.mu.Unlock()
		go func() {
			defer d.wg.Done()
			d.serveConn(ctx, conn)
		}()
	}
	d.shutdown()
	return err
}

func (d *Daemon) shutdown() {
	d.mu.Lock()
	d.closed = true
	cs := make([]*client, 0, len(d.clients))
	for c := range d.clients {
		cs = append(cs, c)
	}
	d.mu.Unlock()
	for _, c := range cs {
		c.detachAs(errors.New("ibexd is shutting down"), false)
	}
	d.wg.Wait()
	d.stopEngines()
	d.closeDevices()
	_ = os.Remove(d.cfg.Socket)
}

func (d *Daemon) closeDevices() {
	for n, c := range d.devs {
		_ = c.Close()
		delete(d.devs, n)
	}
}

func (d *Daemon) add(c *client) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("ibexd is shutting down")
	}
	if d.handing.Load() {
		return errors.New("ibexd is being upgraded: attach again in a moment")
	}
	if len(d.clients) >= d.cfg.Limits.MaxClients {
		return fmt.Errorf("limits.max_clients: %d processes already attached: %w", len(d.clients), verbs.ErrLimit)
	}
	if err := c.tenant.attach(); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	d.clients[c] = struct{}{}
	return nil
}

func (d *Daemon) remove(c *client) {
	d.mu.Lock()
	if _, ok := d.clients[c]; ok {
		delete(d.clients, c)
		c.tenant.mu.Lock()
		c.tenant.clients--
		c.tenant.mu.Unlock()
	}
	d.mu.Unlock()
}

// tenantOf is the tenant the config gives a process, or an error saying
// why it is refused.
func (d *Daemon) tenantOf(who Identity) (*tenant, error) {
	name, ok := d.cfg.TenantOf(who)
	if !ok {
		return nil, fmt.Errorf("%v matches no tenant and the config names no default_tenant: %w", who, ErrRefused)
	}
	return d.tenants[name], nil
}

// qpGone forgets a QP's tenant (the QP is being destroyed).
func (d *Daemon) qpGone(qpn uint32) { d.qpTenant.Delete(qpn) }

// Status is what `ibex daemon status` shows.
func (d *Daemon) Status() ibexdwire.Status {
	st := ibexdwire.Status{PID: os.Getpid(), Socket: d.cfg.Socket, Started: d.started.Format(time.RFC3339),
		Cores: d.cfg.Cores, Detached: d.detached.Load()}
	for _, dc := range d.cfg.Devices {
		ds := ibexdwire.DeviceStatus{Name: dc.Name, Address: dc.AddrPort().String(), Mode: udp.DeviceMode(dc.Name)}
		if c := d.devs[dc.Name]; c != nil {
			ds.Counters, _ = c.PortCounters(1)
			gone := c.DestroyedQPStats(1)
			ds.Destroyed = &gone
		}
		st.Devices = append(st.Devices, ds)
	}
	d.mu.Lock()
	cs := make([]*client, 0, len(d.clients))
	for c := range d.clients {
		cs = append(cs, c)
	}
	d.mu.Unlock()
	for _, c := range cs {
		st.Clients = append(st.Clients, c.status())
	}
	for _, tc := range d.tenantNames() {
		st.Tenants = append(st.Tenants, d.tenants[tc].status())
	}
	return st
}

// tenantNames lists the tenants in the config's order.
func (d *Daemon) tenantNames() []string {
	if len(d.cfg.Tenants) == 0 {
		return []string{ImplicitTenant}
	}
	names := make([]string, len(d.cfg.Tenants))
	for i := range d.cfg.Tenants {
		names[i] = d.cfg.Tenants[i].Name
	}
	return names
}

// Close stops a daemon whose Serve has not been called.
func (d *Daemon) Close() error {
	d.ln.Close()
	d.shutdown()
	return nil
}

// setPKeys gives device dc the P_Key table of cfg's partitions file.
func setPKeys(cfg *Config, dc DeviceConfig) error {
	t, err := cfg.PKeys(dc)
	if err != nil {
		return fmt.Errorf("partitions: %w", err)
	}
	return udp.SetPartitions(dc.Name, t)
}
