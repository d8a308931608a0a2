package fabric

import "fmt"

// Routing is how switches choose among a destination's eligible ports.
type Routing uint8

const (
	RouteDModK    Routing = iota // OpenSM ftree's destination-mod-k (static)
	RouteECMP                    // hash of the QP's flow (static per QP)
	RouteAdaptive                // least queued bytes at the moment a packet passes
)

var routingNames = [...]string{"dmodk", "ecmp", "adaptive"}

func (r Routing) String() string {
	if int(r) < len(routingNames) {
		return routingNames[r]
	}
	return fmt.Sprintf("routing(%d)", uint8(r))
}

// ParseRouting is the inverse of String.
func ParseRouting(s string) (Routing, error) {
	for i, n := range routingNames {
		if s == n {
			return Routing(i), nil
		}
	}
	return 0, fmt.Errorf("routing %q: want dmodk, ecmp or adaptive", s)
}

// LinkLayer is the fabric's link layer: InfiniBand's credit flow control,
// or RoCEv2 over Ethernet with PFC.
type LinkLayer uint8

const (
	LinkIB   LinkLayer = iota // InfiniBand: per-VL credits, lossless by construction
	LinkRoCE                  // RoCEv2: Ethernet framing, PFC per priority, ECN and DCQCN
)

var linkLayerNames = [...]string{"ib", "roce"}

func (l LinkLayer) String() string {
	if int(l) < len(linkLayerNames) {
		return linkLayerNames[l]
	}
	return fmt.Sprintf("linklayer(%d)", uint8(l))
}

// ParseLinkLayer is the inverse of String.
func ParseLinkLayer(s string) (LinkLayer, error) {
	for i, n := range linkLayerNames {
		if s == n {
			return LinkLayer(i), nil
		}
	}
	return 0, fmt.Errorf("link layer %q: want ib or roce", s)
}

// CongestionControl is what a sending QP does about congestion beyond the
// link layer's flow control and NCCL's per-connection slots (which every
// mode keeps).
type CongestionControl uint8

const (
	CCAuto  CongestionControl = iota // DCQCN with RoCE, none with InfiniBand
	CCNone                           // none: with RoCE, PFC and NCCL's receiver-driven admission only (Meta's choice)
	CCDCQCN                          // DCQCN (RoCE only): ECN-marked packets make the receiver send CNPs, which cut the QP's rate
)

var ccNames = [...]string{"auto", "none", "dcqcn"}

func (c CongestionControl) String() string {
	if int(c) < len(ccNames) {
		return ccNames[c]
	}
	return fmt.Sprintf("cc(%d)", uint8(c))
}

// ParseCongestionControl is the inverse of String.
func ParseCongestionControl(s string) (CongestionControl, error) {
	for i, n := range ccNames {
		if s == n {
			return CongestionControl(i), nil
		}
	}
	return 0, fmt.Errorf("congestion control %q: want auto, none or dcqcn", s)
}
