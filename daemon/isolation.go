package daemon

import (
	"fmt"

	"github.com/ibex-rdma/ibex/verbs"
)

// What a tenant's QP may be told by a Modify (checked before the daemon's
// verbs sees it, so a refused change leaves the QP as it was):
//
//   - its pkey_index must name a P_Key of one of the tenant's partitions;
//   - its destination, when that is a QP of this daemon (the destination
//     GID is one of the daemon's devices'), must be a QP of the same
//     tenant: a QPN of another tenant is useless to it, and its packets
//     can reach no other tenant's QP through the daemon.
//
// Across hosts the daemon cannot know the far QP's tenant: there
// partitions (P_Keys on the wire) and encryption keep tenants apart.

// checkModify refuses a Modify of q that would give the tenant a P_Key or
// a destination it may not use (c.mu held).
func (c *client) checkModify(qp *verbs.QP, attr *verbs.QPAttr, mask verbs.AttrMask) error {
	t := c.tenant
	if mask&verbs.AttrPKeyIndex != 0 {
		port := qp.Query().Port
		if mask&verbs.AttrPort != 0 {
			port = attr.Port
		}
		// An index beyond the port's table (or a bad port) is verbs'
		// to refuse, naming it.
		if pkey, err := c.ctx.QueryPKey(max(port, 1), int(attr.PKeyIndex)); err == nil && !t.allowsPKey(pkey) {
			return fmt.Errorf("pkey_index %d is P_Key 0x%04x, not a partition of tenant %q (%s): %w",
				attr.PKeyIndex, pkey, t.name, t.partitions(), verbs.ErrInvalidArgument)
		}
	}
	if mask&(verbs.AttrDestQPN|verbs.AttrAV) == 0 {
		return nil
	}
	cur := qp.Query()
	dgid, dqpn := cur.AH.DGID, cur.DestQPN
	if mask&verbs.AttrAV != 0 {
		dgid = attr.AH.DGID
	}
	if mask&verbs.AttrDestQPN != 0 {
		dqpn = attr.DestQPN
	}
	if !c.d.isLocal(dgid) {
		return nil
	}
	if v, ok := c.d.qpTenant.Load(dqpn); ok && v.(*tenant) != t {
		// The other tenant is not named: its QPNs tell this one nothing.
		return fmt.Errorf("dest_qpn %#x on %v is a QP of another tenant of this daemon; tenant %q may connect only to its own: %w",
			dqpn, dgid, t.name, verbs.ErrInvalidArgument)
	}
	return nil
}

// isLocal says whether gid is the GID of one of the daemon's devices.
func (d *Daemon) isLocal(gid verbs.GID) bool {
	for _, g := range d.gids {
		if g == gid {
			return true
		}
	}
	return false
}
