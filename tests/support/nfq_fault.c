// nfq_fault: a small userspace impairment over NFQUEUE for the fault suite (tests/faults),
// after ../shared/reference/faults/nfq_impair.c. Packets that an nft rule sends to queue Q
// (`... queue num Q`) are held, changed and released by this program, which counts what it
// did and prints the counts as one JSON line on stdout when it gets SIGTERM or SIGINT (held
// packets are released first). It prints "nfq_fault: ready" on stderr once the queue is bound.
//   -q Q    queue number (default 0)
//   -d MS   hold every packet MS milliseconds (FIFO: a fixed delay); each real hold, from the
//           packet's arrival in this program to its verdict, is recorded, and the summary gives
//           their p50, p99 and max (hold_p50_ns, hold_p99_ns, hold_max_ns)
//   -r N    hold every Nth packet until the next one has passed (a swap); if no packet follows
//           within 50 ms the held one goes alone and is not counted as swapped
//   -c N    corrupt every Nth packet: flip the first payload byte (ringblast's magic) and zero
//           the UDP checksum
//   -T N    truncate every Nth packet to 16 payload bytes (shorter than ringblast's header)
//   -t S    give up after S seconds in any case (a bound; default 120)
// Build: cc -O2 -o nfq_fault nfq_fault.c -lnetfilter_queue   (Debian: libnetfilter-queue-dev)
#include <arpa/inet.h>
#include <errno.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <libnfnetlink/libnfnetlink.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAXHELD 65536
#define SWAP_WAIT_US 50000
struct held {
  uint32_t id;
  uint64_t in_ns;
  uint64_t due;
  int len;
  unsigned char *buf;
};
static struct held H[MAXHELD];
static int nheld;
static long delay_ms, reorder_n, corrupt_n, truncate_n;
static long seen, n_delayed, n_swapped, n_unswapped, n_corrupted, n_truncated, n_accepted;
static long n_overrun;
static int pending = -1; // index in H of a packet waiting to be swapped with the next one
static struct nfq_q_handle *qh;
static volatile sig_atomic_t stop;

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t now_us(void) { return now_ns() / 1000; }

#define MAXHOLDS (1 << 20)
static uint64_t holds[MAXHOLDS];
static long n_holds;

static int by_value(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

// The hold of rank ceil(q * n), as the sink ranks its samples.
static uint64_t hold_quantile(double q) {
  if (!n_holds) return 0;
  long rank = (long)(q * (double)n_holds + 0.999999);
  if (rank < 1) rank = 1;
  if (rank > n_holds) rank = n_holds;
  return holds[rank - 1];
}

static void release(int i) {
  nfq_set_verdict(qh, H[i].id, NF_ACCEPT, H[i].buf ? (uint32_t)H[i].len : 0, H[i].buf);
  if (delay_ms && n_holds < MAXHOLDS) holds[n_holds++] = now_ns() - H[i].in_ns;
  free(H[i].buf);
  n_accepted++;
  memmove(&H[i], &H[i + 1], (size_t)(nheld - i - 1) * sizeof H[0]);
  nheld--;
  if (pending == i)
    pending = -1;
  else if (pending > i)
    pending--;
}

static uint16_t ip_checksum(const unsigned char *p, int len) {
  uint32_t sum = 0;
  for (int i = 0; i + 1 < len; i += 2) sum += (uint32_t)(p[i] << 8 | p[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return (uint16_t)~sum;
}

static int cb(struct nfq_q_handle *q, struct nfgenmsg *m, struct nfq_data *nfa, void *d) {
  (void)m;
  (void)d;
  struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
  uint32_t id = ntohl(ph->packet_id);
  unsigned char *pl;
  int len = nfq_get_payload(nfa, &pl);
  seen++;
  unsigned char *copy = NULL;
  int ihl = len > 0 ? (pl[0] & 0x0f) * 4 : 0;
  int udp = len > ihl + 8 && pl[9] == 17;
  if (udp && corrupt_n && seen % corrupt_n == 0) {
    copy = malloc((size_t)len);
    memcpy(copy, pl, (size_t)len);
    copy[ihl + 8] ^= 0xff;
    copy[ihl + 6] = copy[ihl + 7] = 0;
    n_corrupted++;
  } else if (udp && truncate_n && seen % truncate_n == 0 && len > ihl + 8 + 16) {
    int nlen = ihl + 8 + 16;
    copy = malloc((size_t)nlen);
    memcpy(copy, pl, (size_t)nlen);
    copy[2] = (unsigned char)(nlen >> 8);
    copy[3] = (unsigned char)nlen;
    copy[10] = copy[11] = 0;
    uint16_t c = ip_checksum(copy, ihl);
    copy[10] = (unsigned char)(c >> 8);
    copy[11] = (unsigned char)c;
    copy[ihl + 4] = 0;
    copy[ihl + 5] = 8 + 16;
    copy[ihl + 6] = copy[ihl + 7] = 0;
    len = nlen;
    n_truncated++;
  }
  if (nheld >= MAXHELD) {
    n_overrun++;
    int r = nfq_set_verdict(q, id, NF_ACCEPT, copy ? (uint32_t)len : 0, copy);
    free(copy);
    n_accepted++;
    return r;
  }
  H[nheld] = (struct held){id, now_ns(), now_us() + (uint64_t)delay_ms * 1000, len, copy};
  int me = nheld++;
  if (delay_ms) n_delayed++;
  if (reorder_n) {
    if (pending >= 0) { // the new one first, then the held one
      uint32_t older = H[pending].id;
      pending = -1;
      release(me);
      for (int i = 0; i < nheld; i++)
        if (H[i].id == older) {
          release(i);
          break;
        }
      n_swapped++;
      return 0;
    }
    if (seen % reorder_n == 0) {
      pending = me;
      H[me].due = now_us() + SWAP_WAIT_US;
      return 0;
    }
  }
  if (!delay_ms) release(me);
  return 0;
}

int main(int argc, char **argv) {
  int qnum = 0, opt;
  long secs = 120;
  while ((opt = getopt(argc, argv, "q:d:r:c:T:t:")) != -1) {
    switch (opt) {
      case 'q': qnum = atoi(optarg); break;
      case 'd': delay_ms = atol(optarg); break;
      case 'r': reorder_n = atol(optarg); break;
      case 'c': corrupt_n = atol(optarg); break;
      case 'T': truncate_n = atol(optarg); break;
      case 't': secs = atol(optarg); break;
      default:
        fprintf(stderr, "usage: %s [-q Q] [-d MS] [-r N] [-c N] [-T N] [-t SECS]\n", argv[0]);
        return 2;
    }
  }
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  struct nfq_handle *h = nfq_open();
  if (!h) {
    perror("nfq_open");
    return 1;
  }
  qh = nfq_create_queue(h, (uint16_t)qnum, &cb, NULL);
  if (!qh) {
    perror("nfq_create_queue");
    return 1;
  }
  if (nfq_set_mode(qh, NFQNL_COPY_PACKET, 0xffff) < 0) {
    perror("nfq_set_mode");
    return 1;
  }
  nfq_set_queue_maxlen(qh, 20000);
  nfnl_rcvbufsiz(nfq_nfnlh(h), 16 << 20);
  int fd = nfq_fd(h);
  static char buf[1 << 17];
  fprintf(stderr, "nfq_fault: ready (queue %d)\n", qnum);
  uint64_t end = now_us() + (uint64_t)secs * 1000000u;
  while (!stop && now_us() < end) {
    uint64_t t = now_us(), next = t + 50000;
    for (int i = 0; i < nheld;) {
      if (H[i].due <= t) {
        if (i == pending) n_unswapped++;
        release(i);
        continue;
      }
      if (H[i].due < next) next = H[i].due;
      i++;
    }
    int to = (int)((next - t + 999) / 1000);
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, to) > 0) {
      ssize_t r;
      while ((r = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) nfq_handle_packet(h, buf, (int)r);
      if (r < 0 && errno == ENOBUFS) fprintf(stderr, "nfq_fault: ENOBUFS (queue overrun)\n");
    }
  }
  while (nheld) release(0);
  qsort(holds, (size_t)n_holds, sizeof holds[0], by_value);
  printf("{\"seen\":%ld,\"accepted\":%ld,\"delayed\":%ld,\"swapped\":%ld,\"unswapped\":%ld,"
         "\"corrupted\":%ld,\"truncated\":%ld,\"overrun\":%ld,\"holds\":%ld,"
         "\"hold_p50_ns\":%llu,\"hold_p99_ns\":%llu,\"hold_max_ns\":%llu}\n",
         seen, n_accepted, n_delayed, n_swapped, n_unswapped, n_corrupted, n_truncated,
         n_overrun, n_holds, (unsigned long long)hold_quantile(0.5),
         (unsigned long long)hold_quantile(0.99),
         (unsigned long long)(n_holds ? holds[n_holds - 1] : 0));
  fflush(stdout);
  nfq_destroy_queue(qh);
  nfq_close(h);
  return 0;
}
