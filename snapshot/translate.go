package snapshot

import (
	"github.com/novaedge/novaedge/diag"
)

// DefaultTranslators are used when Options.Translators is nil.
//
// This is the seam for Ingress and Gateway API support: a translator appends
// ProxyGateways, ProxyRoutes and ProxyBackends to the Input, and everything
// after it (attachment, plan, node part) treats them like hand-written ones.
// The translations themselves are not written yet; until they are, these
// translators report every such object as ignored, so nobody mistakes
// silence for support.
func DefaultTranslators() []Translator {
	return []Translator{pendingTranslator{}}
}

type pendingTranslator struct{}

func (pendingTranslator) Name() string { return "pending" }

func (pendingTranslator) Translate(in *Input, diags *diag.List) {
	for i := range in.Ingresses {
		ing := &in.Ingresses[i]
		diags.Warnf(diag.Ref{Kind: "Ingress", Namespace: ing.Namespace, Name: ing.Name}, "", "ignored: Ingress translation is not implemented yet")
	}
	for i := range in.APIGateways {
		g := &in.APIGateways[i]
		diags.Warnf(diag.Ref{Kind: "Gateway", Namespace: g.Namespace, Name: g.Name}, "", "ignored: Gateway API translation is not implemented yet")
	}
	for i := range in.HTTPRoutes {
		r := &in.HTTPRoutes[i]
		diags.Warnf(diag.Ref{Kind: "HTTPRoute", Namespace: r.Namespace, Name: r.Name}, "", "ignored: Gateway API translation is not implemented yet")
	}
}

func (b *builder) translate() {
	ts := b.opts.Translators
	if ts == nil {
		ts = DefaultTranslators()
	}
	for _, t := range ts {
		t.Translate(b.in, &b.diags)
	}
}
