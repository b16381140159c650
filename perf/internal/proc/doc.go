// Package proc holds the benchmark harnesses' few signal numbers, kept in
// a small internal package as the repository's lint rules require.
package proc
