// The AF_XDP client's XDP program (xdp_socket.h): redirects this client's
// aggregation answers (IPv4 UDP to its address and port, arriving on its
// queue) to its AF_XDP socket, and passes every other frame to the kernel, so
// the host's networking, ARP and ping keep working on the interface.
//
// Built with clang -target bpf and embedded in the client library. The
// client fills both maps after libxdp attached the program: agg_answer_to[q]
// is the address and port of the socket on queue q (port 0: none), and
// agg_answer_xsks[q] that socket.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

// Queues a client may bind on one interface: ids 0..63.
#define AGG_MAX_QUEUES 64

struct agg_answer_to {
  __be32 ip;
  __be16 port;
  __u16 pad;
};

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, AGG_MAX_QUEUES);
  __type(key, __u32);
  __type(value, struct agg_answer_to);
} agg_answer_to SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, AGG_MAX_QUEUES);
  __type(key, __u32);
  __type(value, __u32);
} agg_answer_xsks SEC(".maps");

SEC("xdp")
int agg_answer_redirect(struct xdp_md *ctx) {
  void *data = (void *)(long)ctx->data;
  void *data_end = (void *)(long)ctx->data_end;
  struct ethhdr *eth = data;
  if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP)) return XDP_PASS;
  struct iphdr *ip = (void *)(eth + 1);
  // The switch sends no IP options and never fragments (DF): anything else
  // is not an answer, and the kernel deals with it.
  if ((void *)(ip + 1) > data_end || ip->ihl != 5 || ip->protocol != IPPROTO_UDP ||
      (ip->frag_off & bpf_htons(0x3fff)) != 0) {
    return XDP_PASS;
  }
  struct udphdr *udp = (void *)(ip + 1);
  if ((void *)(udp + 1) > data_end) return XDP_PASS;
  __u32 queue = ctx->rx_queue_index;
  struct agg_answer_to *to = bpf_map_lookup_elem(&agg_answer_to, &queue);
  if (!to || to->port == 0 || udp->dest != to->port || ip->daddr != to->ip) return XDP_PASS;
  return bpf_redirect_map(&agg_answer_xsks, queue, XDP_PASS);
}

char _license[] SEC("license") = "GPL";
