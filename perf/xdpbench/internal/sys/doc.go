// Package sys holds the XDP benchmark's few raw kernel interfaces (CPU
// affinity, BPF_PROG_TEST_RUN flags), kept in an internal package as the
// repository's lint rules require.
package sys
