/*
 * udp_ref.c - neutral sendmmsg/recvmmsg UDP reference for benches/compare.sh.
 *
 * One binary, two modes, each printing exactly one key=value line on stdout:
 *
 *   udp_ref send -d ADDR -p PORT -s SIZE -b BATCH -t SECONDS [-g GSO_SEGS]
 *       Connected UDP socket. Sends SIZE-byte datagrams with sendmmsg(BATCH)
 *       for SECONDS. With -g N each message is N*SIZE bytes sent with
 *       UDP_SEGMENT=SIZE, i.e. N datagrams per skb (use -b 1 for one GSO
 *       send per syscall). Counts only what the kernel accepted.
 *       Output: sent_pkts=N sent_bytes=N secs=F
 *
 *   udp_ref sink -l ADDR -p PORT -b BATCH -t MAX_SECONDS -i IDLE_MS [-G] [-S]
 *       Binds ADDR:PORT, asks for a 4 MiB receive buffer (SO_RCVBUFFORCE,
 *       then SO_RCVBUF), reads with recvmmsg(BATCH, MSG_WAITFORONE). With -S
 *       it spins instead: recvmmsg(BATCH, MSG_DONTWAIT) in a loop that never
 *       sleeps, so the sending core never pays for waking it. With -G
 *       it enables UDP_GRO and counts segments from the UDP_GRO cmsg. Stops
 *       IDLE_MS after the last datagram (once data has started) or at
 *       MAX_SECONDS. secs is the time from the first to the last datagram.
 *       Output: recv_pkts=N recv_bytes=N secs=F
 *
 * SIGINT/SIGTERM end either mode early; the summary line is still printed.
 * Diagnostics go to stderr. Exit codes: 0 ok, 1 runtime error, 2 usage.
 * Build: gcc -O2 -Wall -Wextra -o udp_ref udp_ref.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

enum { MAX_BATCH = 1024, MAX_GSO_SEGS = 64, MAX_UDP_PAYLOAD = 65507 };
enum { SINK_BUF_LEN = 65536, SINK_RCVBUF = 4 * 1024 * 1024 };

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int signo) {
    (void)signo;
    stop_requested = 1;
}

static int install_stop_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    /* No SA_RESTART: a blocked sendmmsg/recvmmsg returns EINTR. */
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) {
        perror("sigaction");
        return -1;
    }
    return 0;
}

static double monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(void) {
    fprintf(stderr,
            "usage: udp_ref send -d ADDR -p PORT -s SIZE -b BATCH -t SECONDS [-g GSO_SEGS]\n"
            "       udp_ref sink -l ADDR -p PORT -b BATCH -t MAX_SECONDS -i IDLE_MS [-G] [-S]\n");
}

/* Parses a whole decimal integer in [lo, hi]; returns 0 on success. */
static int parse_long(const char *text, const char *what, long lo, long hi, long *out) {
    char *end = NULL;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < lo || value > hi) {
        fprintf(stderr, "udp_ref: %s must be an integer in %ld..%ld, got '%s'\n", what, lo, hi, text);
        return -1;
    }
    *out = value;
    return 0;
}

/* Parses a decimal number of seconds in (0, 3600]; returns 0 on success. */
static int parse_seconds(const char *text, const char *what, double *out) {
    char *end = NULL;
    errno = 0;
    double value = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(value > 0.0) || value > 3600.0) {
        fprintf(stderr, "udp_ref: %s must be a number of seconds in (0, 3600], got '%s'\n", what, text);
        return -1;
    }
    *out = value;
    return 0;
}

static int parse_ipv4(const char *text, uint16_t port, struct sockaddr_in *out) {
    memset(out, 0, sizeof *out);
    out->sin_family = AF_INET;
    out->sin_port = htons(port);
    if (inet_pton(AF_INET, text, &out->sin_addr) != 1) {
        fprintf(stderr, "udp_ref: '%s' is not an IPv4 address\n", text);
        return -1;
    }
    return 0;
}

static int run_send(int argc, char **argv) {
    const char *addr = NULL;
    long port = 0, size = 0, batch = 0, gso_segs = 0;
    double seconds = 0.0;
    int opt;
    while ((opt = getopt(argc, argv, "d:p:s:b:t:g:")) != -1) {
        int bad = 0;
        switch (opt) {
        case 'd': addr = optarg; break;
        case 'p': bad = parse_long(optarg, "-p PORT", 1, 65535, &port); break;
        case 's': bad = parse_long(optarg, "-s SIZE", 1, MAX_UDP_PAYLOAD, &size); break;
        case 'b': bad = parse_long(optarg, "-b BATCH", 1, MAX_BATCH, &batch); break;
        case 't': bad = parse_seconds(optarg, "-t SECONDS", &seconds); break;
        case 'g': bad = parse_long(optarg, "-g GSO_SEGS", 1, MAX_GSO_SEGS, &gso_segs); break;
        default: bad = 1; break;
        }
        if (bad) {
            usage();
            return 2;
        }
    }
    if (addr == NULL || port == 0 || size == 0 || batch == 0 || seconds == 0.0 || optind != argc) {
        usage();
        return 2;
    }
    long segs_per_msg = gso_segs > 0 ? gso_segs : 1;
    size_t msg_len = (size_t)size * (size_t)segs_per_msg;
    if (msg_len > MAX_UDP_PAYLOAD) {
        fprintf(stderr, "udp_ref: -s %ld x -g %ld = %zu bytes exceeds the %d-byte UDP limit; use fewer segments\n",
                size, gso_segs, msg_len, MAX_UDP_PAYLOAD);
        return 2;
    }
    struct sockaddr_in dst;
    if (parse_ipv4(addr, (uint16_t)port, &dst) != 0)
        return 2;
    if (install_stop_handlers() != 0)
        return 1;

    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) {
        perror("udp_ref: socket");
        return 1;
    }
    if (gso_segs > 0) {
        int seg = (int)size;
        if (setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof seg) != 0) {
            perror("udp_ref: setsockopt(UDP_SEGMENT)");
            close(fd);
            return 1;
        }
    }
    if (connect(fd, (struct sockaddr *)&dst, sizeof dst) != 0) {
        perror("udp_ref: connect");
        close(fd);
        return 1;
    }

    /* Every message points at the same payload: contents do not matter here. */
    unsigned char *payload = malloc(msg_len);
    struct mmsghdr *msgs = calloc((size_t)batch, sizeof *msgs);
    struct iovec *iovs = calloc((size_t)batch, sizeof *iovs);
    if (payload == NULL || msgs == NULL || iovs == NULL) {
        fprintf(stderr, "udp_ref: out of memory\n");
        free(payload);
        free(msgs);
        free(iovs);
        close(fd);
        return 1;
    }
    for (size_t i = 0; i < msg_len; i++)
        payload[i] = (unsigned char)(i & 0xff);
    for (long i = 0; i < batch; i++) {
        iovs[i].iov_base = payload;
        iovs[i].iov_len = msg_len;
        msgs[i].msg_hdr.msg_iov = &iovs[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }

    uint64_t sent_msgs = 0, transient_errors = 0;
    int status = 0;
    double start = monotonic_seconds();
    double deadline = start + seconds;
    double now = start;
    while (!stop_requested && now < deadline) {
        int n = sendmmsg(fd, msgs, (unsigned)batch, 0);
        now = monotonic_seconds();
        if (n > 0) {
            sent_msgs += (uint64_t)n;
        } else if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == ENOBUFS || errno == ECONNREFUSED)) {
            /* ECONNREFUSED: an ICMP port-unreachable from before the sink bound. */
            transient_errors++;
        } else if (n < 0) {
            perror("udp_ref: sendmmsg");
            status = 1;
            break;
        }
    }
    double secs = now - start;
    uint64_t pkts = sent_msgs * (uint64_t)segs_per_msg;
    printf("sent_pkts=%llu sent_bytes=%llu secs=%.6f\n", (unsigned long long)pkts,
           (unsigned long long)(pkts * (uint64_t)size), secs);
    if (transient_errors > 0)
        fprintf(stderr, "udp_ref send: %llu transient send errors (EAGAIN/ENOBUFS/ECONNREFUSED/EINTR)\n",
                (unsigned long long)transient_errors);
    free(payload);
    free(msgs);
    free(iovs);
    close(fd);
    return status;
}

static void set_receive_buffer(int fd) {
    int want = SINK_RCVBUF;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &want, sizeof want) != 0 &&
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof want) != 0)
        perror("udp_ref: setsockopt(SO_RCVBUF)");
    int got = 0;
    socklen_t len = sizeof got;
    if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &len) == 0)
        fprintf(stderr, "udp_ref sink: effective SO_RCVBUF %d bytes\n", got);
}

/* Number of datagrams one received buffer holds (GRO may coalesce several). */
static uint64_t segments_in(struct msghdr *hdr, unsigned len) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(hdr); c != NULL; c = CMSG_NXTHDR(hdr, c)) {
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            int seg_size = 0;
            memcpy(&seg_size, CMSG_DATA(c), sizeof seg_size);
            if (seg_size > 0)
                return ((uint64_t)len + (uint64_t)seg_size - 1) / (uint64_t)seg_size;
        }
    }
    return 1;
}

static int run_sink(int argc, char **argv) {
    const char *addr = NULL;
    long port = 0, batch = 0, idle_ms = 0;
    double max_seconds = 0.0;
    int gro = 0, spin = 0;
    int opt;
    while ((opt = getopt(argc, argv, "l:p:b:t:i:GS")) != -1) {
        int bad = 0;
        switch (opt) {
        case 'l': addr = optarg; break;
        case 'p': bad = parse_long(optarg, "-p PORT", 1, 65535, &port); break;
        case 'b': bad = parse_long(optarg, "-b BATCH", 1, MAX_BATCH, &batch); break;
        case 't': bad = parse_seconds(optarg, "-t MAX_SECONDS", &max_seconds); break;
        case 'i': bad = parse_long(optarg, "-i IDLE_MS", 1, 600000, &idle_ms); break;
        case 'G': gro = 1; break;
        case 'S': spin = 1; break;
        default: bad = 1; break;
        }
        if (bad) {
            usage();
            return 2;
        }
    }
    if (addr == NULL || port == 0 || batch == 0 || max_seconds == 0.0 || idle_ms == 0 || optind != argc) {
        usage();
        return 2;
    }
    struct sockaddr_in local;
    if (parse_ipv4(addr, (uint16_t)port, &local) != 0)
        return 2;
    if (install_stop_handlers() != 0)
        return 1;

    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) {
        perror("udp_ref: socket");
        return 1;
    }
    set_receive_buffer(fd);
    if (gro) {
        int one = 1;
        if (setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one) != 0) {
            perror("udp_ref: setsockopt(UDP_GRO)");
            close(fd);
            return 1;
        }
    }
    /* Wake at least every 100 ms (or IDLE_MS if shorter) to check the limits. */
    long wake_ms = idle_ms < 100 ? idle_ms : 100;
    struct timeval wake = {.tv_sec = 0, .tv_usec = (suseconds_t)(wake_ms * 1000)};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wake, sizeof wake) != 0) {
        perror("udp_ref: setsockopt(SO_RCVTIMEO)");
        close(fd);
        return 1;
    }
    if (bind(fd, (struct sockaddr *)&local, sizeof local) != 0) {
        perror("udp_ref: bind");
        close(fd);
        return 1;
    }

    const size_t cmsg_len = CMSG_SPACE(sizeof(int));
    unsigned char *bufs = malloc((size_t)batch * SINK_BUF_LEN);
    unsigned char *cmsgs = calloc((size_t)batch, cmsg_len);
    struct mmsghdr *msgs = calloc((size_t)batch, sizeof *msgs);
    struct iovec *iovs = calloc((size_t)batch, sizeof *iovs);
    if (bufs == NULL || cmsgs == NULL || msgs == NULL || iovs == NULL) {
        fprintf(stderr, "udp_ref: out of memory\n");
        free(bufs);
        free(cmsgs);
        free(msgs);
        free(iovs);
        close(fd);
        return 1;
    }
    for (long i = 0; i < batch; i++) {
        iovs[i].iov_base = bufs + (size_t)i * SINK_BUF_LEN;
        iovs[i].iov_len = SINK_BUF_LEN;
        msgs[i].msg_hdr.msg_iov = &iovs[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }

    uint64_t pkts = 0, bytes = 0;
    int status = 0;
    double start = monotonic_seconds();
    double first = -1.0, last = -1.0;
    for (;;) {
        double now = monotonic_seconds();
        if (stop_requested || now - start >= max_seconds)
            break;
        if (last >= 0.0 && (now - last) * 1000.0 >= (double)idle_ms)
            break;
        for (long i = 0; i < batch; i++) {
            msgs[i].msg_hdr.msg_control = gro ? cmsgs + (size_t)i * cmsg_len : NULL;
            msgs[i].msg_hdr.msg_controllen = gro ? cmsg_len : 0;
        }
        int n = recvmmsg(fd, msgs, (unsigned)batch, spin ? MSG_DONTWAIT : MSG_WAITFORONE, NULL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                continue;
            perror("udp_ref: recvmmsg");
            status = 1;
            break;
        }
        if (n == 0)
            continue;
        double got_at = monotonic_seconds();
        if (first < 0.0)
            first = got_at;
        last = got_at;
        for (int i = 0; i < n; i++) {
            pkts += gro ? segments_in(&msgs[i].msg_hdr, msgs[i].msg_len) : 1;
            bytes += msgs[i].msg_len;
        }
    }
    double secs = first >= 0.0 ? last - first : 0.0;
    printf("recv_pkts=%llu recv_bytes=%llu secs=%.6f\n", (unsigned long long)pkts, (unsigned long long)bytes,
           secs);
    free(bufs);
    free(cmsgs);
    free(msgs);
    free(iovs);
    close(fd);
    return status;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage();
        return 2;
    }
    /* getopt sees the mode's own arguments, with the mode name as argv[0]. */
    if (strcmp(argv[1], "send") == 0)
        return run_send(argc - 1, argv + 1);
    if (strcmp(argv[1], "sink") == 0)
        return run_sink(argc - 1, argv + 1);
    usage();
    return 2;
}
