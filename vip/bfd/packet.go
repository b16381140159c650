package bfd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// State is a BFD session state as carried in the Sta field of a control
// packet (RFC 5880 §4.1).
type State uint8

// Session states.
const (
	StateAdminDown State = 0
	StateDown      State = 1
	StateInit      State = 2
	StateUp        State = 3
)

func (s State) String() string {
	switch s {
	case StateAdminDown:
		return "AdminDown"
	case StateDown:
		return "Down"
	case StateInit:
		return "Init"
	case StateUp:
		return "Up"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Diag is a BFD diagnostic code: why the session last changed state
// (RFC 5880 §4.1).
type Diag uint8

// Diagnostic codes.
const (
	DiagNone                    Diag = 0
	DiagControlDetectionExpired Diag = 1
	DiagEchoFailed              Diag = 2
	DiagNeighborDown            Diag = 3
	DiagForwardingPlaneReset    Diag = 4
	DiagPathDown                Diag = 5
	DiagConcatenatedPathDown    Diag = 6
	DiagAdminDown               Diag = 7
	DiagReverseConcatPathDown   Diag = 8
)

func (d Diag) String() string {
	switch d {
	case DiagNone:
		return "no diagnostic"
	case DiagControlDetectionExpired:
		return "control detection time expired"
	case DiagEchoFailed:
		return "echo function failed"
	case DiagNeighborDown:
		return "neighbor signaled session down"
	case DiagForwardingPlaneReset:
		return "forwarding plane reset"
	case DiagPathDown:
		return "path down"
	case DiagConcatenatedPathDown:
		return "concatenated path down"
	case DiagAdminDown:
		return "administratively down"
	case DiagReverseConcatPathDown:
		return "reverse concatenated path down"
	}
	return fmt.Sprintf("diag %d", uint8(d))
}

// AuthType is the type of an authentication section (RFC 5880 §4.1). The
// package supports none of them; it parses the type only to say which one a
// peer tried to use.
type AuthType uint8

// Authentication types.
const (
	AuthReserved            AuthType = 0
	AuthSimplePassword      AuthType = 1
	AuthKeyedMD5            AuthType = 2
	AuthMeticulousKeyedMD5  AuthType = 3
	AuthKeyedSHA1           AuthType = 4
	AuthMeticulousKeyedSHA1 AuthType = 5
)

// Version is the protocol version this package speaks.
const Version = 1

const (
	controlPacketLength = 24
	// The authentication section starts with a type and a length byte.
	controlPacketLengthWithAuthHdr = 26
)

func (a AuthType) String() string {
	switch a {
	case AuthReserved:
		return "reserved (0)"
	case AuthSimplePassword:
		return "simple password"
	case AuthKeyedMD5:
		return "keyed MD5"
	case AuthMeticulousKeyedMD5:
		return "meticulous keyed MD5"
	case AuthKeyedSHA1:
		return "keyed SHA1"
	case AuthMeticulousKeyedSHA1:
		return "meticulous keyed SHA1"
	}
	return fmt.Sprintf("unknown (%d)", uint8(a))
}

// Errors returned by [ControlPacket.UnmarshalBinary]. Every packet that
// fails is to be discarded (RFC 5880 §6.8.6); the wrapped message says why.
var (
	// ErrMalformed marks a packet that breaks a reception rule of RFC 5880
	// §6.8.6 (bad version, length, detect multiplier, M bit, discriminators).
	ErrMalformed = errors.New("malformed bfd control packet")
	// ErrAuthNotSupported marks a packet with the A bit set: this package
	// configures no authentication, so §6.8.6 requires such packets to be
	// discarded.
	ErrAuthNotSupported = errors.New("bfd authentication not supported")
)

// maxInterval is the largest interval a control packet can carry: the
// fields are 32-bit counts of microseconds.
const maxInterval = time.Duration(math.MaxUint32) * time.Microsecond

// ControlPacket is a BFD control packet (RFC 5880 §4.1) without an
// authentication section. Intervals are whole microseconds on the wire.
type ControlPacket struct {
	Diag  Diag
	State State
	// Poll, Final, ControlPlaneIndependent, Demand and Multipoint are the P,
	// F, C, D and M bits. The A bit has no field: packets with it cannot be
	// built and are rejected when parsed.
	Poll                      bool
	Final                     bool
	ControlPlaneIndependent   bool
	Demand                    bool
	Multipoint                bool
	DetectMult                uint8
	MyDiscriminator           uint32
	YourDiscriminator         uint32
	DesiredMinTxInterval      time.Duration
	RequiredMinRxInterval     time.Duration
	RequiredMinEchoRxInterval time.Duration
}

const (
	bitPoll   = 0x20
	bitFinal  = 0x10
	bitCPI    = 0x08
	bitAuth   = 0x04
	bitDemand = 0x02
	bitMulti  = 0x01
)

// AppendBinary appends the packet's wire form (24 bytes, version 1) to b. It
// fails when the state, diagnostic or an interval does not fit its field.
// Sub-microsecond parts of intervals are dropped.
func (p *ControlPacket) AppendBinary(b []byte) ([]byte, error) {
	if p.State > StateUp {
		return b, fmt.Errorf("state %d does not fit the 2-bit Sta field", p.State)
	}
	if p.Diag > 31 {
		return b, fmt.Errorf("diag %d does not fit the 5-bit Diag field", p.Diag)
	}
	if p.Poll && p.Final {
		// RFC 5880 §4.1: a packet MUST NOT have both bits set.
		return b, errors.New("poll and final bits both set")
	}
	ivs := [3]struct {
		name string
		d    time.Duration
	}{
		{"desired min tx interval", p.DesiredMinTxInterval},
		{"required min rx interval", p.RequiredMinRxInterval},
		{"required min echo rx interval", p.RequiredMinEchoRxInterval},
	}
	for _, iv := range ivs {
		if iv.d < 0 || iv.d > maxInterval {
			return b, fmt.Errorf("%s %v outside 0..%v", iv.name, iv.d, maxInterval)
		}
	}
	var flags byte
	if p.Poll {
		flags |= bitPoll
	}
	if p.Final {
		flags |= bitFinal
	}
	if p.ControlPlaneIndependent {
		flags |= bitCPI
	}
	if p.Demand {
		flags |= bitDemand
	}
	if p.Multipoint {
		flags |= bitMulti
	}
	b = append(b, Version<<5|byte(p.Diag), byte(p.State)<<6|flags, p.DetectMult, controlPacketLength)
	b = binary.BigEndian.AppendUint32(b, p.MyDiscriminator)
	b = binary.BigEndian.AppendUint32(b, p.YourDiscriminator)
	for _, iv := range ivs {
		b = binary.BigEndian.AppendUint32(b, uint32(iv.d/time.Microsecond))
	}
	return b, nil
}

// MarshalBinary returns the packet's wire form; see [ControlPacket.AppendBinary].
func (p *ControlPacket) MarshalBinary() ([]byte, error) {
	return p.AppendBinary(make([]byte, 0, controlPacketLength))
}

// UnmarshalBinary parses b, the whole UDP payload, and applies the reception
// checks of RFC 5880 §6.8.6 that do not depend on session state: version 1,
// a Length field of at least 24 (26 with the A bit) and no larger than b,
// a non-zero detect multiplier, the M bit clear, a non-zero My
// Discriminator, and a zero Your Discriminator only in Down or AdminDown.
// It also rejects a packet with both the P and F bits set, which §4.1 forbids
// and whose meaning would be ambiguous. A packet with the A bit set fails with [ErrAuthNotSupported] naming the
// authentication type. Bytes after Length are ignored. On error p is left
// in an unspecified state.
func (p *ControlPacket) UnmarshalBinary(b []byte) error {
	if len(b) < controlPacketLength {
		return fmt.Errorf("%w: %d bytes, want at least %d", ErrMalformed, len(b), controlPacketLength)
	}
	if v := b[0] >> 5; v != Version {
		return fmt.Errorf("%w: version %d, want %d", ErrMalformed, v, Version)
	}
	flags := b[1]
	length := int(b[3])
	auth := flags&bitAuth != 0
	switch {
	case length < controlPacketLength:
		return fmt.Errorf("%w: length field %d below %d", ErrMalformed, length, controlPacketLength)
	case auth && length < controlPacketLengthWithAuthHdr:
		return fmt.Errorf("%w: length field %d below %d with the A bit set", ErrMalformed, length, controlPacketLengthWithAuthHdr)
	case length > len(b):
		return fmt.Errorf("%w: length field %d exceeds the %d-byte payload", ErrMalformed, length, len(b))
	}
	*p = ControlPacket{
		Diag:                      Diag(b[0] & 0x1f),
		State:                     State(flags >> 6),
		Poll:                      flags&bitPoll != 0,
		Final:                     flags&bitFinal != 0,
		ControlPlaneIndependent:   flags&bitCPI != 0,
		Demand:                    flags&bitDemand != 0,
		Multipoint:                flags&bitMulti != 0,
		DetectMult:                b[2],
		MyDiscriminator:           binary.BigEndian.Uint32(b[4:]),
		YourDiscriminator:         binary.BigEndian.Uint32(b[8:]),
		DesiredMinTxInterval:      time.Duration(binary.BigEndian.Uint32(b[12:])) * time.Microsecond,
		RequiredMinRxInterval:     time.Duration(binary.BigEndian.Uint32(b[16:])) * time.Microsecond,
		RequiredMinEchoRxInterval: time.Duration(binary.BigEndian.Uint32(b[20:])) * time.Microsecond,
	}
	switch {
	case p.DetectMult == 0:
		return fmt.Errorf("%w: detect multiplier 0", ErrMalformed)
	case p.Multipoint:
		return fmt.Errorf("%w: multipoint (M) bit set", ErrMalformed)
	case p.MyDiscriminator == 0:
		return fmt.Errorf("%w: my discriminator 0", ErrMalformed)
	case p.YourDiscriminator == 0 && p.State != StateDown && p.State != StateAdminDown:
		return fmt.Errorf("%w: your discriminator 0 in state %v", ErrMalformed, p.State)
	case p.Poll && p.Final:
		return fmt.Errorf("%w: poll and final bits both set", ErrMalformed)
	}
	if auth {
		typ, alen := AuthType(b[24]), int(b[25])
		if alen < 2 || controlPacketLength+alen > length {
			return fmt.Errorf("%w: auth len %d does not fit length field %d", ErrMalformed, alen, length)
		}
		return fmt.Errorf("%w: peer uses authentication type %v", ErrAuthNotSupported, typ)
	}
	return nil
}
