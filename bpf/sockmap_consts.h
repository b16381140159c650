/*
 * sockmap_consts.h: tunables of the sockmap splicing program. Each is an
 * overridable define; map sizes can also be changed at load time through
 * CollectionSpec.Maps[name].MaxEntries.
 */
#ifndef NOVAEDGE_SOCKMAP_CONSTS_H
#define NOVAEDGE_SOCKMAP_CONSTS_H

/* Spliced socket pairs held at once: each pair takes two entries. */
#ifndef SOCKMAP_MAX_PAIRS
#define SOCKMAP_MAX_PAIRS 65536
#endif

#endif /* NOVAEDGE_SOCKMAP_CONSTS_H */
