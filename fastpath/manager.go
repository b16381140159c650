package fastpath

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/novaedge/novaedge/fastpath/flowhash"
	"github.com/novaedge/novaedge/fastpath/lineage"
	"github.com/novaedge/novaedge/fastpath/maglev"
	fastpathbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// ManagerOptions configure a Manager. Zero values are the defaults.
type ManagerOptions struct {
	// Logger receives one line per applied change; nil discards.
	Logger *slog.Logger
	// Lineage builds each new Maglev table from the one installed, so that
	// removing one of N backends remaps only its 1/N of the slots. Tables
	// then depend on the order of past changes, which every node sees alike
	// only when all receive the same sequence of snapshots; without
	// Lineage, equal backend sets give byte-identical tables on every node
	// whatever their history, at the cost of remapping about 0.7 % more
	// slots per change.
	Lineage bool
	// IDHold is how long a released backend or VIP ID stays unused, so
	// that tracked flows naming it expire first. Zero means 2 h (the
	// default TCP idle lifetime is 1 h).
	IDHold time.Duration
	// Now returns the time; nil means time.Now. Tests inject a clock.
	Now func() time.Time
}

// Manager writes Configs into the program's maps. Its methods are safe for
// concurrent use; applies are serialised.
type Manager struct {
	mu       sync.Mutex
	objs     *Objects
	log      *slog.Logger
	opts     ManagerOptions
	builder  *maglev.Builder
	inner    *ebpf.MapSpec
	vips     map[vipKey]*installedVIP
	addrs    map[netip.Addr]bool
	backends map[backendKey]uint32
	vipIDs   *idPool
	beIDs    *idPool
	node     fastpathbpf.FastpathNodeConfig
	// filter is what fp_vip_filter holds.
	filter *vipFilter
}

type installedVIP struct {
	id    uint32
	info  fastpathbpf.FastpathVipInfo
	table maglev.Table
}

// NewManager returns a Manager of objs' maps. Maps that already hold
// entries (pinned by an agent that ran before) are adopted: their VIP and
// backend IDs are kept, so tracked flows keep their backends across an
// agent restart, and their tables are the lineage of the next build.
func NewManager(objs *Objects, opts ManagerOptions) (*Manager, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.IDHold == 0 {
		opts.IDHold = 2 * time.Hour
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b, err := maglev.NewBuilder(objs.MaglevSize)
	if err != nil {
		return nil, fmt.Errorf("maglev builder: %w", err)
	}
	mi, err := objs.FpMaglev.Info()
	if err != nil {
		return nil, fmt.Errorf("fp_maglev info: %w", err)
	}
	bi, err := objs.FpBackends.Info()
	if err != nil {
		return nil, fmt.Errorf("fp_backends info: %w", err)
	}
	m := &Manager{
		objs:     objs,
		log:      log,
		opts:     opts,
		builder:  b,
		inner:    &ebpf.MapSpec{Name: "fp_maglev_tbl", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: objs.MaglevSize},
		vips:     make(map[vipKey]*installedVIP),
		addrs:    make(map[netip.Addr]bool),
		backends: make(map[backendKey]uint32),
		vipIDs:   newIDPool(mi.MaxEntries, opts.IDHold),
		beIDs:    newIDPool(bi.MaxEntries, opts.IDHold),
	}
	if err := m.adopt(); err != nil {
		return nil, fmt.Errorf("adopt pinned maps: %w", err)
	}
	return m, nil
}

// adopt reads what the maps already hold.
func (m *Manager) adopt() error {
	var (
		k    fastpathbpf.FastpathVipKey
		info fastpathbpf.FastpathVipInfo
	)
	it := m.objs.FpVips.Iterate()
	for it.Next(&k, &info) {
		addr := addrFrom(k.Addr, k.Family)
		if k.Port == 0 && k.Proto == 0 {
			m.addrs[addr] = true
			continue
		}
		iv := &installedVIP{id: info.Id, info: info}
		if info.Id != 0 {
			m.vipIDs.reserve(info.Id)
			t, err := m.readTable(info.Id)
			if err != nil {
				return err
			}
			iv.table = t
		}
		m.vips[vipKey{addr, k.Port, k.Proto}] = iv
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("iterate fp_vips: %w", err)
	}
	var (
		id uint32
		be fastpathbpf.FastpathBackend
	)
	bit := m.objs.FpBackends.Iterate()
	for bit.Next(&id, &be) {
		if be.Flags&uint8(fastpathbpf.FastpathFpBackendFlagsFP_BACKEND_ACTIVE) == 0 {
			continue
		}
		m.backends[backendKey{addrFrom(be.Addr, be.Family), be.Port}] = id
		m.beIDs.reserve(id)
	}
	if err := bit.Err(); err != nil {
		return fmt.Errorf("iterate fp_backends: %w", err)
	}
	now := m.opts.Now()
	m.vipIDs.quarantineGaps(now)
	m.beIDs.quarantineGaps(now)
	var cfg fastpathbpf.FastpathNodeConfig
	if err := m.objs.FpConfig.Lookup(uint32(0), &cfg); err != nil {
		return fmt.Errorf("read fp_config: %w", err)
	}
	m.node = cfg
	f, err := readVIPFilter(m.objs.FpVipFilter)
	if err != nil {
		return err
	}
	m.filter = f
	if len(m.vips)+len(m.backends) > 0 {
		m.log.Info("adopted fast path state", "vips", len(m.vips), "backends", len(m.backends))
	}
	return nil
}

func (m *Manager) readTable(vipID uint32) (maglev.Table, error) {
	var inner *ebpf.Map
	if err := m.objs.FpMaglev.Lookup(vipID, &inner); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read maglev table of VIP %d: %w", vipID, err)
	}
	defer func() { _ = inner.Close() }()
	return readInner(inner, m.objs.MaglevSize)
}

func readInner(inner *ebpf.Map, size uint32) (maglev.Table, error) {
	t := make(maglev.Table, size)
	var slot, id uint32
	it := inner.Iterate()
	for it.Next(&slot, &id) {
		if slot < size {
			t[slot] = id
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read maglev table: %w", err)
	}
	return t, nil
}

// ApplyResult says what an Apply changed.
type ApplyResult struct {
	VIPsAdded, VIPsUpdated, VIPsRemoved           int
	BackendsAdded, BackendsRemoved, TablesSwapped int
}

type plannedVIP struct {
	key   vipKey
	vip   VIP
	id    uint32
	info  fastpathbpf.FastpathVipInfo
	table maglev.Table
}

// Apply makes the maps hold c. It validates and computes everything first
// (IDs, Maglev tables), so an invalid c changes nothing, and then writes in
// the order that never shows the program a half-applied configuration:
// node settings, new backends, new Maglev tables (each swapped in whole),
// VIP entries, and last the removal of VIPs and backends no longer wanted.
func (m *Manager) Apply(c Config) (ApplyResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var res ApplyResult
	if err := c.Validate(); err != nil {
		return res, fmt.Errorf("fast path config: %w", err)
	}
	now := m.opts.Now()
	savedV, savedB := m.vipIDs.save(), m.beIDs.save()
	plan, newBackends, err := m.compute(c, now)
	if err != nil {
		m.vipIDs.restore(savedV)
		m.beIDs.restore(savedB)
		return res, err
	}

	// 1. The prefilter gains the new VIP entries' bits before they exist
	// (it loses the removed ones' after they are gone). Node settings
	// next: a new NAT VIP needs the NAT flag and addresses.
	filter := new(vipFilter)
	for _, p := range plan {
		filter.set(p.key)
	}
	if wide := m.filter.union(filter); *wide != *m.filter {
		if err := writeVIPFilter(m.objs.FpVipFilter, m.filter, wide); err != nil {
			return res, err
		}
		m.filter = wide
	}
	node := nodeConfig(c)
	node.Flags |= uint32(fastpathbpf.FastpathFpConfigFlagsFP_CFG_VIP_FILTER)
	node.VipEpoch = m.node.VipEpoch
	if node != m.node {
		if err := m.objs.FpConfig.Put(uint32(0), &node); err != nil {
			return res, fmt.Errorf("write fp_config: %w", err)
		}
		m.node = node
	}
	// 2. Backends the new tables name.
	for _, nb := range newBackends {
		v := backendValue(nb.key)
		if err := m.objs.FpBackends.Put(nb.id, &v); err != nil {
			return res, fmt.Errorf("write backend %s (ID %d): %w", nb.key, nb.id, err)
		}
		m.backends[nb.key] = nb.id
		res.BackendsAdded++
	}
	// 3. Tables, each swapped in with one update of the outer map.
	for _, p := range plan {
		if p.info.Forward == uint8(ForwardPass) {
			continue
		}
		if old := m.vips[p.key]; old != nil && old.id == p.id && slices.Equal(old.table, p.table) {
			continue
		}
		if err := m.swapTable(p.id, p.table); err != nil {
			return res, fmt.Errorf("VIP %s: %w", vipString(p.vip), err)
		}
		res.TablesSwapped++
	}
	// 4. VIP entries.
	want := make(map[vipKey]bool, len(plan))
	for _, p := range plan {
		want[p.key] = true
		old := m.vips[p.key]
		if old != nil && old.info == p.info {
			old.table = p.table
			continue
		}
		k := vipKeyValue(p.key)
		if err := m.objs.FpVips.Put(&k, &p.info); err != nil {
			return res, fmt.Errorf("write VIP %s: %w", vipString(p.vip), err)
		}
		if old == nil {
			res.VIPsAdded++
		} else {
			res.VIPsUpdated++
			if old.id != 0 && old.id != p.id {
				m.dropVIPID(old.id, now)
			}
		}
		m.vips[p.key] = &installedVIP{id: p.id, info: p.info, table: p.table}
	}
	addrs := make(map[netip.Addr]bool)
	for _, v := range c.VIPs {
		addrs[v.Addr.Unmap()] = true
	}
	for a := range addrs {
		if m.addrs[a] {
			continue
		}
		k := vipKeyValue(vipKey{addr: a})
		info := fastpathbpf.FastpathVipInfo{Flags: uint32(fastpathbpf.FastpathFpVipFlagsFP_VIP_ECHO)}
		if err := m.objs.FpVips.Put(&k, &info); err != nil {
			return res, fmt.Errorf("write VIP address %s: %w", a, err)
		}
		m.addrs[a] = true
	}
	// 5. Removals, now that nothing new refers to them.
	for key, iv := range m.vips {
		if want[key] {
			continue
		}
		k := vipKeyValue(key)
		if err := m.objs.FpVips.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return res, fmt.Errorf("delete VIP %v: %w", key, err)
		}
		if iv.id != 0 {
			m.dropVIPID(iv.id, now)
		}
		delete(m.vips, key)
		res.VIPsRemoved++
	}
	for a := range m.addrs {
		if addrs[a] {
			continue
		}
		k := vipKeyValue(vipKey{addr: a})
		if err := m.objs.FpVips.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return res, fmt.Errorf("delete VIP address %s: %w", a, err)
		}
		delete(m.addrs, a)
	}
	if *filter != *m.filter {
		if err := writeVIPFilter(m.objs.FpVipFilter, m.filter, filter); err != nil {
			return res, err
		}
		m.filter = filter
	}
	// 6. A new epoch makes tracked flows look their VIP entries up again:
	// their copies may be stale now. Written after every VIP change, and
	// the program reads it before its lookup, so a copy tagged with it is
	// never older than the entries it was taken from.
	if res.VIPsAdded+res.VIPsUpdated+res.VIPsRemoved > 0 {
		node := m.node
		node.VipEpoch++
		if node.VipEpoch == 0 {
			node.VipEpoch = 1
		}
		if err := m.objs.FpConfig.Put(uint32(0), &node); err != nil {
			return res, fmt.Errorf("write fp_config (VIP epoch): %w", err)
		}
		m.node = node
	}
	used := make(map[backendKey]bool)
	for _, p := range plan {
		for _, b := range p.vip.Backends {
			if p.info.Forward != uint8(ForwardPass) {
				used[backendKey{b.Addr.Unmap(), b.Port}] = true
			}
		}
	}
	for key, id := range m.backends {
		if used[key] {
			continue
		}
		var zero fastpathbpf.FastpathBackend
		if err := m.objs.FpBackends.Put(id, &zero); err != nil {
			return res, fmt.Errorf("remove backend %s (ID %d): %w", key, id, err)
		}
		delete(m.backends, key)
		m.beIDs.put(id, now)
		res.BackendsRemoved++
	}
	if res != (ApplyResult{}) {
		m.log.Info("fast path tables applied", "vips_added", res.VIPsAdded, "vips_updated", res.VIPsUpdated,
			"vips_removed", res.VIPsRemoved, "backends_added", res.BackendsAdded,
			"backends_removed", res.BackendsRemoved, "tables_swapped", res.TablesSwapped)
	}
	return res, nil
}

type newBackend struct {
	key backendKey
	id  uint32
}

// compute assigns IDs and builds tables without writing anything.
func (m *Manager) compute(c Config, now time.Time) ([]plannedVIP, []newBackend, error) {
	var fresh []newBackend
	ids := make(map[backendKey]uint32, len(m.backends))
	for k, id := range m.backends {
		ids[k] = id
	}
	var plan []plannedVIP
	for _, v := range sortedVIPs(c.VIPs) {
		key := keyOf(v)
		p := plannedVIP{key: key, vip: v}
		p.info.Forward = uint8(v.Forward)
		if v.Forward == ForwardDSRGUE {
			p.info.GuePort = v.GUEPort
		}
		if v.ClientAffinity && v.Forward != ForwardPass {
			p.info.Flags |= uint32(fastpathbpf.FastpathFpVipFlagsFP_VIP_AFFINITY_CLIENT)
		}
		old := m.vips[key]
		if v.Forward != ForwardPass {
			switch {
			case old != nil && old.id != 0:
				p.id = old.id
			default:
				id, err := m.vipIDs.get(now)
				if err != nil {
					return nil, nil, fmt.Errorf("VIP %s: %w (at most %d VIP entries)", vipString(v), err, m.vipIDs.max-1)
				}
				p.id = id
			}
			p.info.Id = p.id
			members := make([]maglev.Backend, 0, len(v.Backends))
			for _, b := range v.Backends {
				bk := backendKey{b.Addr.Unmap(), b.Port}
				id, ok := ids[bk]
				if !ok {
					var err error
					id, err = m.beIDs.get(now)
					if err != nil {
						return nil, nil, fmt.Errorf("VIP %s backend %s: %w (at most %d backends)", vipString(v), bk, err, m.beIDs.max-1)
					}
					ids[bk] = id
					fresh = append(fresh, newBackend{bk, id})
				}
				w := b.Weight
				if b.Draining {
					w = 0
				}
				members = append(members, maglev.Backend{Key: bk.String(), Weight: w, ID: id})
			}
			t, err := m.build(old, members, v.Lineage)
			if err != nil {
				return nil, nil, fmt.Errorf("VIP %s: maglev table: %w", vipString(v), err)
			}
			p.table = t
		}
		plan = append(plan, p)
	}
	return plan, fresh, nil
}

// build returns the table of members: from the snapshot's lineage when it
// carries one (the same table on every node), else from the installed
// table with opts.Lineage, else from members alone.
func (m *Manager) build(old *installedVIP, members []maglev.Backend, lin *pb.MaglevLineage) (maglev.Table, error) {
	live := false
	for _, b := range members {
		if b.Weight > 0 {
			live = true
			break
		}
	}
	if !live {
		// No backend takes new flows: an all-zero table drops them
		// (counted as no_backend) while tracked flows go on.
		return make(maglev.Table, m.objs.MaglevSize), nil
	}
	var ids map[string]uint32
	if lin != nil {
		ids = make(map[string]uint32, len(members))
		for _, b := range members {
			ids[b.Key] = b.ID
		}
	}
	var t maglev.Table
	prev, err := lineage.Prev(lin, m.objs.MaglevSize, func(key string) (uint32, bool) {
		id, ok := ids[key]
		return id, ok
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("lineage: %w", err)
	case prev != nil:
		t, err = m.builder.BuildFrom(prev, members)
	case m.opts.Lineage && old != nil && len(old.table) == int(m.objs.MaglevSize):
		t, err = m.builder.BuildFrom(old.table, members)
	default:
		t, err = m.builder.Build(members)
	}
	if err != nil {
		return nil, err
	}
	return slices.Clone(t), nil
}

func (m *Manager) swapTable(vipID uint32, t maglev.Table) error {
	inner, err := ebpf.NewMap(m.inner)
	if err != nil {
		return fmt.Errorf("create maglev table: %w", err)
	}
	defer func() { _ = inner.Close() }()
	keys := make([]uint32, len(t))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := inner.BatchUpdate(keys, []uint32(t), nil); err != nil {
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return fmt.Errorf("fill maglev table: %w", err)
		}
		for i, id := range t {
			if err := inner.Put(uint32(i), id); err != nil {
				return fmt.Errorf("fill maglev table slot %d: %w", i, err)
			}
		}
	}
	if err := m.objs.FpMaglev.Put(vipID, inner); err != nil {
		return fmt.Errorf("swap maglev table: %w", err)
	}
	return nil
}

func (m *Manager) dropVIPID(id uint32, now time.Time) {
	if err := m.objs.FpMaglev.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		m.log.Warn("delete maglev table", "vip_id", id, "err", err)
	}
	m.vipIDs.put(id, now)
}

// Table returns the installed Maglev table of the VIP entry, or nil.
func (m *Manager) Table(addr netip.Addr, port uint16, proto uint8) maglev.Table {
	m.mu.Lock()
	defer m.mu.Unlock()
	if iv := m.vips[vipKey{addr.Unmap(), port, proto}]; iv != nil {
		return slices.Clone(iv.table)
	}
	return nil
}

// BackendID returns the ID of the backend, if installed.
func (m *Manager) BackendID(addr netip.Addr, port uint16) (uint32, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.backends[backendKey{addr.Unmap(), port}]
	return id, ok
}

func nodeConfig(c Config) fastpathbpf.FastpathNodeConfig {
	var n fastpathbpf.FastpathNodeConfig
	if c.Node.V4.IsValid() {
		n.NodeV4 = c.Node.V4.Unmap().As4()
	}
	if c.Node.V6.IsValid() && !c.Node.V6.Is4In6() {
		n.NodeV6 = c.Node.V6.As16()
	}
	n.NatPortMin, n.NatPortMax = c.Node.NATPortMin, c.Node.NATPortMax
	if n.NatPortMin == 0 && n.NatPortMax == 0 {
		n.NatPortMin, n.NatPortMax = DefaultNATPortMin, DefaultNATPortMax
	}
	n.TcpSynTimeout = seconds(c.Node.TCPSynTimeout)
	n.TcpTimeout = seconds(c.Node.TCPTimeout)
	n.TcpClosingTimeout = seconds(c.Node.TCPClosingTimeout)
	n.UdpTimeout = seconds(c.Node.UDPTimeout)
	keepClient := false
	for _, v := range c.VIPs {
		if v.Forward == ForwardNAT || v.Forward == ForwardNATKeepClient {
			n.Flags |= uint32(fastpathbpf.FastpathFpConfigFlagsFP_CFG_NAT)
		}
		keepClient = keepClient || v.Forward == ForwardNATKeepClient
	}
	// Without a VIP keeping the client address every reply mapping is
	// towards the node's SNAT ports, which lets the program skip the NAT
	// lookup for the node's other traffic. Like the NAT flag, it follows
	// the new config from step 1 of Apply on: a VIP keeping the client
	// address clears it before its entry exists.
	if n.Flags&uint32(fastpathbpf.FastpathFpConfigFlagsFP_CFG_NAT) != 0 && !keepClient {
		n.Flags |= uint32(fastpathbpf.FastpathFpConfigFlagsFP_CFG_NAT_SNAT_ONLY)
	}
	return n
}

func seconds(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	return uint32(max(1, d/time.Second))
}

func backendValue(k backendKey) fastpathbpf.FastpathBackend {
	return fastpathbpf.FastpathBackend{
		Addr:   flowhash.Addr16(k.addr),
		Port:   k.port,
		Family: familyOf(k.addr),
		Flags:  uint8(fastpathbpf.FastpathFpBackendFlagsFP_BACKEND_ACTIVE),
	}
}

func vipKeyValue(k vipKey) fastpathbpf.FastpathVipKey {
	return fastpathbpf.FastpathVipKey{Addr: flowhash.Addr16(k.addr), Port: k.port, Proto: k.proto, Family: familyOf(k.addr)}
}

func familyOf(a netip.Addr) uint8 {
	if a.Unmap().Is4() {
		return uint8(fastpathbpf.FastpathFpFamilyFP_FAMILY_IPV4)
	}
	return uint8(fastpathbpf.FastpathFpFamilyFP_FAMILY_IPV6)
}

func addrFrom(b [16]byte, family uint8) netip.Addr {
	if family == uint8(fastpathbpf.FastpathFpFamilyFP_FAMILY_IPV4) {
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrFrom16(b)
}
