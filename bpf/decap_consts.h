/*
 * decap_consts.h: tunables of the DSR decapsulation program. Each is an
 * overridable define; map sizes can also be changed at load time through
 * CollectionSpec.Maps[name].MaxEntries.
 */
#ifndef NOVAEDGE_DECAP_CONSTS_H
#define NOVAEDGE_DECAP_CONSTS_H

/*
 * UDP destination port of GUE-encapsulated packets when the config entry
 * holds 0 (user space always writes one; this keeps a program loaded by
 * other tools, such as bpftool, useful).
 */
#ifndef DECAP_DEFAULT_GUE_PORT
#define DECAP_DEFAULT_GUE_PORT 6080
#endif

/* Entries of the allow-list of local outer destination addresses. */
#ifndef DECAP_MAX_LOCAL_ADDRS
#define DECAP_MAX_LOCAL_ADDRS 256
#endif

#endif /* NOVAEDGE_DECAP_CONSTS_H */
