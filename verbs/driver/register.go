package driver

import (
	"fmt"

	"github.com/ibex-rdma/ibex/verbs"
)

// Register makes a provider available to verbs.Open by name. It panics on
// a duplicate name: registration happens in init functions, where that is
// a programming error.
func Register(p Provider) { v.Register(providerBinding{p}) }

// providerBinding and deviceBinding adapt a provider to the bindings verbs
// calls (their method sets name only verbs' types; see verbs/provider.go).
type providerBinding struct{ p Provider }

func (b providerBinding) Name() string      { return b.p.Name() }
func (b providerBinding) Devices() []string { return b.p.Devices() }

func (b providerBinding) OpenDevice(device string, c *verbs.Context) (any, error) {
	d, err := b.p.Open(device, Context{c})
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, fmt.Errorf("provider %s: Open returned no device", b.p.Name())
	}
	pub, _ := d.(MRPublisher)
	keys, _ := d.(KeyAssigner)
	return deviceBinding{d: d, pub: pub, keys: keys}, nil
}

type deviceBinding struct {
	d    Device
	pub  MRPublisher
	keys KeyAssigner
}

func (b deviceBinding) AssignKeys(mr *verbs.MR) (lkey, rkey uint32, ok bool, err error) {
	if b.keys == nil {
		return 0, 0, false, nil
	}
	lkey, rkey, err = b.keys.AssignKeys(MR{mr})
	return lkey, rkey, err == nil, err
}

func (b deviceBinding) DeviceAttr() verbs.DeviceAttr                { return b.d.DeviceAttr() }
func (b deviceBinding) PortAttr(port uint8) (verbs.PortAttr, error) { return b.d.PortAttr(port) }
func (b deviceBinding) Close() error                                { return b.d.Close() }
func (b deviceBinding) Device() any                                 { return b.d }

func (b deviceBinding) NewQPFor(qp *verbs.QP) (any, error) {
	d, err := b.d.NewQP(QP{qp})
	if err != nil {
		return nil, err
	}
	return d, nil
}

func (b deviceBinding) RegMR(mr *verbs.MR) error {
	if b.pub == nil {
		return nil
	}
	return b.pub.RegMR(MR{mr})
}

func (b deviceBinding) DeregMR(mr *verbs.MR) {
	if b.pub != nil {
		b.pub.DeregMR(MR{mr})
	}
}
