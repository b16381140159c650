package bgp

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	api "github.com/osrg/gobgp/v3/api"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// wellKnownCommunities are the names the ProxyVIP API accepts, with their
// values (RFC 1997, RFC 3765, RFC 7999, RFC 8326). "local-as" is the
// NO_EXPORT_SUBCONFED community, as routers name it.
var wellKnownCommunities = map[string]uint32{
	"graceful-shutdown": 0xFFFF0000,
	"blackhole":         0xFFFF029A,
	"no-export":         0xFFFFFF01,
	"no-advertise":      0xFFFFFF02,
	"local-as":          0xFFFFFF03,
	"no-peer":           0xFFFFFF04,
}

// parseCommunity reads "ASN:value" (each 0–65535) or a well-known name.
func parseCommunity(s string) (uint32, error) {
	if v, ok := wellKnownCommunities[s]; ok {
		return v, nil
	}
	hi, lo, ok := strings.Cut(s, ":")
	if !ok {
		return 0, fmt.Errorf("community %q: want ASN:value or a well-known name", s)
	}
	a, err1 := strconv.ParseUint(hi, 10, 16)
	b, err2 := strconv.ParseUint(lo, 10, 16)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("community %q: both parts must be 0-65535", s)
	}
	return uint32(a)<<16 | uint32(b), nil
}

// parseLargeCommunity reads "ASN:x:y", each part 0–4294967295.
func parseLargeCommunity(s string) (*api.LargeCommunity, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return nil, fmt.Errorf("large community %q: want ASN:x:y", s)
	}
	var v [3]uint32
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("large community %q: every part must be 0-4294967295", s)
		}
		v[i] = uint32(n)
	}
	return &api.LargeCommunity{GlobalAdmin: v[0], LocalData1: v[1], LocalData2: v[2]}, nil
}

// attributes returns the path attributes of r other than the next hop and
// origin, validated.
func (r Route) attributes() ([]proto.Message, error) {
	var out []proto.Message
	if len(r.Communities) > 0 {
		c := &api.CommunitiesAttribute{}
		for _, s := range r.Communities {
			v, err := parseCommunity(s)
			if err != nil {
				return nil, err
			}
			c.Communities = append(c.Communities, v)
		}
		out = append(out, c)
	}
	if len(r.LargeCommunities) > 0 {
		c := &api.LargeCommunitiesAttribute{}
		for _, s := range r.LargeCommunities {
			v, err := parseLargeCommunity(s)
			if err != nil {
				return nil, err
			}
			c.Communities = append(c.Communities, v)
		}
		out = append(out, c)
	}
	if r.LocalPreference != nil {
		out = append(out, &api.LocalPrefAttribute{LocalPref: *r.LocalPreference})
	}
	if r.MED != nil {
		out = append(out, &api.MultiExitDiscAttribute{Med: *r.MED})
	}
	return out, nil
}

// sameAttributes says whether r and o announce the same path.
func (r Route) sameAttributes(o Route) bool {
	eq := func(a, b *uint32) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	return r.Prefix == o.Prefix && slices.Equal(r.Communities, o.Communities) &&
		slices.Equal(r.LargeCommunities, o.LargeCommunities) &&
		eq(r.LocalPreference, o.LocalPreference) && eq(r.MED, o.MED)
}

// apiFamily is the unicast family of the route's address.
func apiFamily(is4 bool) *api.Family {
	if is4 {
		return &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	}
	return &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
}

// path converts r to a GoBGP path with an unspecified next hop, which GoBGP
// replaces by the session's local address for every peer (next hop self).
func (r Route) path() (*api.Path, error) {
	attrs, err := r.attributes()
	if err != nil {
		return nil, err
	}
	addr := r.Prefix.Addr()
	nlri, err := anypb.New(&api.IPAddressPrefix{Prefix: addr.String(), PrefixLen: uint32(r.Prefix.Bits())})
	if err != nil {
		return nil, fmt.Errorf("encode nlri %s: %w", r.Prefix, err)
	}
	fam := apiFamily(addr.Is4())
	all := []proto.Message{&api.OriginAttribute{Origin: 0}} // IGP
	if addr.Is4() {
		all = append(all, &api.NextHopAttribute{NextHop: "0.0.0.0"})
	} else {
		all = append(all, &api.MpReachNLRIAttribute{Family: fam, NextHops: []string{"::"}, Nlris: []*anypb.Any{nlri}})
	}
	all = append(all, attrs...)
	p := &api.Path{Family: fam, Nlri: nlri}
	for _, m := range all {
		a, err := anypb.New(m)
		if err != nil {
			return nil, fmt.Errorf("encode attributes of %s: %w", r.Prefix, err)
		}
		p.Pattrs = append(p.Pattrs, a)
	}
	return p, nil
}
