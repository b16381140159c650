// Package router is the slow path's compiled HTTP router: Compile turns the
// snapshot's HTTP routes attached to one listener into an immutable Router
// whose Match picks the rule for a request with Gateway API HTTPRoute
// semantics, and whose rules carry compiled filters (header modifiers,
// URL rewrite, redirect, mirrors) for the proxy to apply. A Router is safe for
// concurrent use and never changes; a new snapshot compiles a new one.
//
// # Which routes
//
// Compile takes the routes of kind HTTP whose Listeners field names the
// listener; every other route is ignored. The input order of the routes is
// their precedence order on ties (the snapshot sorts them by
// "<namespace>/<name>", which is Gateway API's alphabetical tie-breaker; it
// carries no creation timestamps).
//
// # Hostnames
//
// Hostnames are compared in lower case without a trailing dot. "*.example.com"
// matches a host with one or more labels before ".example.com"
// ("a.example.com", "a.b.example.com") but not "example.com". The
// effective hostnames of a route on the listener are the intersection of the
// listener's and the route's hostnames, none on a side meaning any: route
// "a.example.com" on listener "*.example.com" gives "a.example.com"; route
// "*.example.com" on listener "a.example.com" gives "a.example.com"; two
// wildcards give the narrower one; a route without hostnames takes the
// listener's. A route with hostnames of which none intersects the listener's
// serves nothing. So a Host that no listener hostname accepts matches nothing.
//
// The request's host is Request.Host (URL.Host when empty), with the port
// removed (an IPv6 literal keeps its brackets), one trailing dot removed and
// ASCII letters lowered (which allocates only when the host has upper-case
// letters).
//
// # Precedence
//
// Gateway API orders the candidate rules of all routes by, first, the
// characters of the matching non-wildcard hostname, then the characters of the
// matching hostname (HTTPRouteSpec.Hostnames), then by the match
// (HTTPRouteRule.Matches). Match implements that order with host groups: the
// group of the exact hostname, then the wildcard groups from the longest
// suffix to the shortest, then the group of routes that accept any host. It
// returns the best match of the first group that has one. A request for
// "a.example.com" that no rule of the "a.example.com" routes matches therefore
// falls back to the "*.example.com" routes, then to routes without hostnames,
// as the spec's single ordering across all rules requires (implementations
// that select an Envoy virtual host first answer 404 there instead).
//
// Within a group the matches of all rules are ordered by:
//
//  1. path match type: Exact, then RegularExpression, then PathPrefix (the
//     spec leaves RegularExpression's place to implementations; this is Envoy
//     Gateway's order);
//  2. among RegularExpression matches, the longer expression; among PathPrefix
//     matches, the longer prefix in characters, trailing slashes excluded
//     ("/foo/" and "/foo" tie);
//  3. a match with a method before one without;
//  4. more header matches;
//  5. more query parameter matches;
//  6. the route's position in Compile's input, then the rule's index, then the
//     match's index.
//
// Match returns the first match in that order whose conditions all hold. A
// rule without matches has the implicit match PathPrefix "/".
//
// # Conditions
//
// The conditions of one match must all hold (AND); the matches of a rule are
// alternatives (OR).
//
// Path is compared with URL.Path, the decoded path as received ("/a%2Fb" is
// "/a/b"; an empty path is "/"); nothing is cleaned or rejected here, that is
// the proxy's job before Match. Exact compares the whole path. PathPrefix
// matches whole path segments: "/foo" (or "/foo/") matches "/foo", "/foo/" and
// "/foo/bar" but not "/foobar"; "/" matches every path. Matching is
// case-sensitive.
//
// Headers: names are case-insensitive, values case-sensitive. A header
// repeated in the request is matched as its values joined with "," (RFC 9110
// section 5.3); an absent header matches nothing, not even "". The "Host"
// header is Request.Host as received.
//
// Query parameters: names are case-sensitive; the first occurrence of the
// parameter is used (the spec's recommendation), decoded as url.ParseQuery
// decodes it (pairs it would reject are skipped).
//
// When a match lists a header or a query parameter name more than once, only
// the first entry counts, for matching and for precedence, as the spec
// requires. RegularExpression values, for paths, headers and query
// parameters, are Go RE2 anchored to the whole value. Method is compared
// exactly (methods are case-sensitive).
//
// # Filters
//
// Header modifiers apply remove, then set, then add (Envoy's order; the spec
// gives none): set replaces every value of a header, add appends a value to
// the existing ones, so a header both set and added ends with both values.
//
// URLRewrite replaces the Host and the path. ReplacePrefixMatch replaces the
// matched prefix (trailing slash excluded) on a segment boundary: with prefix
// "/foo", "/foo/bar" becomes "/xyz/bar" for "/xyz" or "/xyz/", and "/bar" for
// "/" or ""; "/foo/" becomes "/xyz/"; the result is never empty. It needs
// every match of its rule to be a PathPrefix (Gateway API sets the route not
// Accepted otherwise), which Compile enforces.
//
// RequestRedirect builds a Location from the scheme (default: the request's,
// https when it came over TLS or the listener is HTTPS or HTTP3), hostname
// (default: the request's, port removed), path (as received, or replaced like
// URLRewrite) and the query string as received. The port, unless set, is the
// well-known port of the redirect scheme when the scheme is set, or else the
// listener's port (the request's Host port when the listener has none); it is
// left out of the Location when it is the well-known port of the scheme
// (http 80, https 443). The status is the one given, 302 by default.
//
// Backends, Retry, Timeouts, Policies and mirrors pass through as the
// snapshot gives them; the pb messages are shared with the snapshot and must
// not be modified.
package router
