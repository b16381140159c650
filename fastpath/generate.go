package fastpath

// The XDP fast path's object and Go bindings live in gen/bpf/fastpath; the
// C types shared with user space come from BTF (-type), never by hand.
//
// -mcpu=v3 (bpf2go defaults to v1) lets clang use 32-bit subregisters and
// 32-bit jumps (kernel 5.1+): without them every __u32 operation of the
// flow hash, the checksums and the prefilter runs on 64-bit registers with
// explicit masking and more spills to the stack. It made every path 2-4 ns
// cheaper (perf/xdpcost, kernel ns).
//go:generate bpf2go -target bpfel -output-dir ../gen/bpf/fastpath -go-package fastpathbpf -type vip_key -type vip_info -type backend -type flow_key -type flow_key4 -type ct_value -type nat_value -type node_config -type fp_traffic -type fp_counter -type fp_forward -type fp_family -type fp_vip_flags -type fp_backend_flags -type ct_state -type fp_config_flags -type nexthop -type flow_cache_entry Fastpath ../bpf/fastpath.bpf.c -- -Wall -Werror -mcpu=v3
