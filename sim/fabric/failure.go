package fabric

import (
	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// Failure takes a link down at a time, in either engine's Config.
type Failure struct {
	At   des.Time
	Link topo.LinkID
}
