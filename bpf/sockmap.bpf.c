/*
 * sockmap.bpf.c: splices established TCP socket pairs of the slow path's L4
 * proxy inside the kernel. User space (slowpath/l4/sockmap) puts each socket
 * of a pair into sockmap_peers under the cookie of the other one, then into
 * sockmap_spliced, to which this program is attached as the sk_skb verdict
 * (BPF_SK_SKB_VERDICT, no stream parser: every received skb is judged as it
 * comes). Bytes arriving on one socket are then queued to the other socket's
 * egress without waking user space.
 */
#include "include/uapi.h"
#include "include/bpf_helpers.h"
#include "sockmap_maps.h"
#include "sockmap_structs.h"

/*
 * The kernel checks this string only for GPL-only helpers, which the program
 * does not call; it states the terms the kernel-facing object is offered on.
 */
char __license[] SEC("license") = "Dual BSD/GPL";

/*
 * account adds len bytes to the counter chosen by redirected in the stats of
 * the socket with the given cookie. The entry is created by user space before
 * the socket enters sockmap_peers; a missing one is not counted.
 */
static __always_inline void account(__u64 cookie, __u32 len, int redirected)
{
	struct dir_stats *st = bpf_map_lookup_elem(&sockmap_stats, &cookie);

	if (!st)
		return;
	if (redirected)
		__sync_fetch_and_add(&st->redirected_bytes, len);
	else
		__sync_fetch_and_add(&st->passed_bytes, len);
}

SEC("sk_skb/verdict")
int sockmap_verdict(struct __sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(skb);
	__u32 len = skb->len;

	/*
	 * An empty skb carries only a FIN, which TCP has already applied to
	 * this socket (user space sees it as POLLRDHUP). Redirected, the
	 * peer's work queue would "send" it as zero bytes, which the kernel
	 * treats as a broken pipe: it sets EPIPE on the peer and stops all
	 * further redirects to it.
	 */
	if (len == 0)
		return SK_DROP;
	if (bpf_sk_redirect_hash(skb, &sockmap_peers, &cookie, 0) == SK_PASS) {
		account(cookie, len, 1);
		return SK_PASS;
	}
	/*
	 * No peer (the pair is being torn down): keep the bytes on the socket
	 * they arrived on, readable as usual, instead of dropping them.
	 */
	account(cookie, len, 0);
	return SK_PASS;
}
