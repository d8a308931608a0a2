package udp

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/ibex-rdma/ibex/internal/partitions"
)

// Partitions: each device's port has a P_Key table (default one entry,
// 0xffff: full member of the default partition). A QP sends the P_Key its
// pkey_index names and takes only packets whose P_Key matches it (IBA
// 10.9.3: the same partition, low 15 bits, and one of the two a full
// member; two limited members cannot talk). Others are dropped and
// counted: PKeyViolations (PortInfo's P_KeyViolations; package metrics
// gives it as PortRcvConstraintErrors too).

// SetPartitions gives device name, before it is first opened, the P_Key
// table of its port (each entry a P_Key, bit 15 set for full membership;
// index 0 first). nil restores the default table. ibexd sets it from its
// configuration's partitions file; a process without a daemon may name a
// partitions.conf in IBEX_UDP_PARTITIONS instead.
func SetPartitions(name string, table []uint16) error {
	for i, k := range table {
		if k&0x7fff == 0 {
			return fmt.Errorf("udp: set partitions %s: entry %d: %#04x is the invalid P_Key", name, i, k)
		}
	}
	if len(table) > 0xffff {
		return fmt.Errorf("udp: set partitions %s: %d entries; a P_Key index is 16 bits", name, len(table))
	}
	prov.mu.Lock()
	defer prov.mu.Unlock()
	if prov.live[name] != nil {
		return fmt.Errorf("udp: set partitions %s: already open", name)
	}
	if table == nil {
		delete(prov.pkeys, name)
	} else {
		prov.pkeys[name] = append([]uint16(nil), table...)
	}
	return nil
}

// PartitionsEnv names a partitions.conf (opensm's syntax, package
// internal/partitions) that gives every device opened in this process,
// unless SetPartitions gave it one, the table of its address's port.
const PartitionsEnv = "IBEX_UDP_PARTITIONS"

// pkeyTable is the table device name at addr starts with (prov.mu held).
func (p *provider) pkeyTable(name string, addr netip.AddrPort) ([]uint16, error) {
	if t, ok := p.pkeys[name]; ok {
		return t, nil
	}
	path := os.Getenv(PartitionsEnv)
	if path == "" {
		return []uint16{0xffff}, nil
	}
	c, err := partitions.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("udp: device %s: %s: %w", name, PartitionsEnv, err)
	}
	t, err := c.Table(partitions.Port{Addr: addr.Addr()})
	if err != nil {
		return nil, fmt.Errorf("udp: device %s: %s=%s: %w", name, PartitionsEnv, path, err)
	}
	return t, nil
}

// PKeys implements driver.PKeyTable.
func (drv *opened) PKeys(port uint8) []uint16 {
	if port != 1 {
		return nil
	}
	return drv.dev.pkeys
}

// pkeyAt is entry i of the device's table; the default P_Key if i is
// beyond it (verbs refuses such an index at Modify).
func (d *device) pkeyAt(i uint16) uint16 {
	if int(i) < len(d.pkeys) {
		return d.pkeys[i]
	}
	return 0xffff
}
