/* A far link for benchmarks (scripts/bench_far.py), since the kernel here has
 * no netem: a TCP relay on 127.0.0.1 in front of one server in which every
 * accepted connection is a link of its own. Every byte is held for half the
 * round trip each way, a new connection's first bytes wait one round trip
 * more (the handshake), each direction of each connection is capped at a
 * rate (a token bucket of RATE bytes a second, a burst of 64 KiB), and each
 * direction holds at most a window of bytes not yet acknowledged, where a
 * byte is acknowledged half a round trip after it was delivered: a stream
 * then runs at most at WINDOW / RTT, as TCP over such a link does.
 *
 * Usage: relay UPSTREAM_PORT RTT_MS RATE_BYTES_PER_S WINDOW_BYTES
 * (RATE 0: no cap). Prints "port N" once listening on 127.0.0.1; then each
 * line "stats" on stdin is answered with one line
 * "connections N max_open N bytes_up N bytes_down N" (max_open: the most
 * connections open at once since the last such line); it ends at EOF of
 * stdin or SIGTERM. Build: gcc -O2 -pthread -o relay relay.c */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (64u << 10)
#define BURST (64u << 10)

struct conn;

struct chunk {
    struct chunk *next;
    int64_t due;   /* ns: when it may be delivered */
    int64_t acked; /* ns: when its window credit comes back, once written */
    size_t len, off;
    unsigned char data[];
};

struct dir {
    int from, to;
    bool upstream; /* client to server: the handshake delays its first bytes */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct chunk *head, *tail;   /* read, not yet written */
    struct chunk *whead, *wtail; /* written, not yet acknowledged */
    size_t inflight;             /* bytes of both lists */
    bool eof, dead;
    _Atomic uint64_t *bytes;
    struct conn *conn;
};

struct conn {
    struct dir d[2];
    atomic_int threads;
    int cfd, sfd;
};

static int upstream_port;
static int64_t oneway_ns, rtt_ns;
static double rate;
static size_t window;
static _Atomic uint64_t total_conns, open_conns, max_open, bytes_up, bytes_down;

static int64_t now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static struct timespec abs_time(int64_t ns)
{
    return (struct timespec){ns / 1000000000, ns % 1000000000};
}

/* Frees what was acknowledged by now; called with the lock held. */
static void prune_acked(struct dir *d, int64_t now)
{
    while (d->whead && d->whead->acked <= now) {
        struct chunk *c = d->whead;
        d->whead = c->next;
        if (!d->whead)
            d->wtail = NULL;
        d->inflight -= c->len;
        free(c);
    }
}

static void conn_put(struct conn *c)
{
    if (atomic_fetch_sub(&c->threads, 1) != 1)
        return;
    close(c->cfd);
    close(c->sfd);
    for (int i = 0; i < 2; i++) {
        struct dir *d = &c->d[i];
        for (struct chunk *k = d->head, *n; k; k = n) {
            n = k->next;
            free(k);
        }
        for (struct chunk *k = d->whead, *n; k; k = n) {
            n = k->next;
            free(k);
        }
        pthread_mutex_destroy(&d->lock);
        pthread_cond_destroy(&d->cond);
    }
    free(c);
    atomic_fetch_sub(&open_conns, 1);
}

static void *reader(void *arg)
{
    struct dir *d = arg;
    struct conn *c = d->conn;
    int64_t start = now_ns();
    bool first = true;

    for (;;) {
        pthread_mutex_lock(&d->lock);
        for (;;) {
            int64_t now = now_ns();
            prune_acked(d, now);
            if (d->dead || d->inflight < window)
                break;
            struct timespec until = abs_time(d->whead ? d->whead->acked : now + oneway_ns);
            pthread_cond_timedwait(&d->cond, &d->lock, &until);
        }
        bool dead = d->dead;
        pthread_mutex_unlock(&d->lock);
        if (dead)
            break;
        struct chunk *k = malloc(sizeof(*k) + CHUNK);
        if (!k)
            break;
        ssize_t n = read(d->from, k->data, CHUNK);
        if (n <= 0) {
            free(k);
            break;
        }
        int64_t now = now_ns();
        k->next = NULL;
        k->len = (size_t)n;
        k->off = 0;
        k->due = now + oneway_ns;
        /* SYN, SYN-ACK: the request leaves one round trip after the accept */
        if (d->upstream && first && k->due < start + rtt_ns + oneway_ns)
            k->due = start + rtt_ns + oneway_ns;
        first = false;
        pthread_mutex_lock(&d->lock);
        if (d->tail)
            d->tail->next = k;
        else
            d->head = k;
        d->tail = k;
        d->inflight += k->len;
        pthread_cond_broadcast(&d->cond);
        pthread_mutex_unlock(&d->lock);
    }
    pthread_mutex_lock(&d->lock);
    d->eof = true;
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
    conn_put(c);
    return NULL;
}

static void *writer(void *arg)
{
    struct dir *d = arg;
    struct conn *c = d->conn;
    double tokens = BURST;
    int64_t last = now_ns();

    pthread_mutex_lock(&d->lock);
    for (;;) {
        int64_t now = now_ns();
        prune_acked(d, now);
        if (!d->head) {
            if (d->eof)
                break;
            pthread_cond_wait(&d->cond, &d->lock);
            continue;
        }
        struct chunk *k = d->head;
        if (now < k->due) {
            struct timespec until = abs_time(k->due);
            pthread_cond_timedwait(&d->cond, &d->lock, &until);
            continue;
        }
        size_t n = k->len - k->off;
        if (rate > 0) {
            tokens += (double)(now - last) * 1e-9 * rate;
            if (tokens > BURST)
                tokens = BURST;
            last = now;
            if (tokens < 1.0 || (tokens < (double)n && tokens < BURST / 4)) {
                double need = (n < BURST / 4 ? (double)n : BURST / 4) - tokens;
                struct timespec until = abs_time(now + (int64_t)(need / rate * 1e9) + 1);
                pthread_mutex_unlock(&d->lock);
                clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL);
                pthread_mutex_lock(&d->lock);
                continue;
            }
            if ((double)n > tokens)
                n = (size_t)tokens;
        }
        pthread_mutex_unlock(&d->lock);
        ssize_t w = send(d->to, k->data + k->off, n, MSG_NOSIGNAL);
        pthread_mutex_lock(&d->lock);
        if (w <= 0) {
            d->dead = true;
            /* wake the reader blocked in read(): it is to stop */
            shutdown(d->from, SHUT_RD);
            pthread_cond_broadcast(&d->cond);
            while (d->head) {
                struct chunk *x = d->head;
                d->head = x->next;
                d->inflight -= x->len;
                free(x);
            }
            d->tail = NULL;
            break;
        }
        if (rate > 0)
            tokens -= (double)w;
        atomic_fetch_add(d->bytes, (uint64_t)w);
        k->off += (size_t)w;
        if (k->off == k->len) {
            d->head = k->next;
            if (!d->head)
                d->tail = NULL;
            k->next = NULL;
            k->acked = now_ns() + oneway_ns;
            if (d->wtail)
                d->wtail->next = k;
            else
                d->whead = k;
            d->wtail = k;
            pthread_cond_broadcast(&d->cond);
        }
    }
    pthread_mutex_unlock(&d->lock);
    shutdown(d->to, SHUT_WR);
    conn_put(c);
    return NULL;
}

static int connect_upstream(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)upstream_port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static void start(struct conn *c)
{
    pthread_attr_t attr;
    pthread_t t;
    void *(*fn[4])(void *) = {reader, writer, reader, writer};

    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 128u << 10);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    atomic_store(&c->threads, 4);
    for (int i = 0; i < 4; i++)
        if (pthread_create(&t, &attr, fn[i], &c->d[i / 2]) != 0) {
            fprintf(stderr, "relay: pthread_create failed\n");
            exit(1);
        }
    pthread_attr_destroy(&attr);
}

static void accept_one(int lfd)
{
    int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC), one = 1;

    if (cfd < 0)
        return;
    int sfd = connect_upstream();
    struct conn *c = calloc(1, sizeof(*c));
    if (sfd < 0 || !c) {
        close(cfd);
        if (sfd >= 0)
            close(sfd);
        free(c);
        return;
    }
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->cfd = cfd;
    c->sfd = sfd;
    c->d[0] = (struct dir){.from = cfd, .to = sfd, .upstream = true, .bytes = &bytes_up, .conn = c};
    c->d[1] =
        (struct dir){.from = sfd, .to = cfd, .upstream = false, .bytes = &bytes_down, .conn = c};
    for (int i = 0; i < 2; i++) {
        pthread_mutex_init(&c->d[i].lock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&c->d[i].cond, &ca);
        pthread_condattr_destroy(&ca);
    }
    atomic_fetch_add(&total_conns, 1);
    uint64_t open = atomic_fetch_add(&open_conns, 1) + 1;
    for (uint64_t m = atomic_load(&max_open); open > m;)
        if (atomic_compare_exchange_weak(&max_open, &m, open))
            break;
    start(c);
}

static void stats(void)
{
    printf("connections %llu max_open %llu bytes_up %llu bytes_down %llu\n",
           (unsigned long long)atomic_load(&total_conns),
           (unsigned long long)atomic_load(&max_open), (unsigned long long)atomic_load(&bytes_up),
           (unsigned long long)atomic_load(&bytes_down));
    fflush(stdout);
    /* the next line's max_open: the most open since this one */
    atomic_store(&max_open, atomic_load(&open_conns));
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: relay UPSTREAM_PORT RTT_MS RATE_BYTES_PER_S WINDOW_BYTES\n");
        return 2;
    }
    upstream_port = atoi(argv[1]);
    rtt_ns = (int64_t)(atof(argv[2]) * 1e6);
    oneway_ns = rtt_ns / 2;
    rate = atof(argv[3]);
    window = (size_t)atoll(argv[4]);
    if (window < CHUNK)
        window = CHUNK;
    signal(SIGPIPE, SIG_IGN);

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t alen = sizeof(a);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 128) != 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &alen) != 0) {
        perror("relay: listen");
        return 1;
    }
    printf("port %d\n", ntohs(a.sin_port));
    fflush(stdout);

    struct pollfd p[2] = {{.fd = lfd, .events = POLLIN}, {.fd = 0, .events = POLLIN}};
    char line[64];
    size_t have = 0;
    for (;;) {
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[0].revents & POLLIN)
            accept_one(lfd);
        if (p[1].revents & (POLLIN | POLLHUP)) {
            ssize_t n = read(0, line + have, sizeof(line) - 1 - have);
            if (n <= 0)
                break;
            have += (size_t)n;
            line[have] = '\0';
            char *nl;
            while ((nl = strchr(line, '\n'))) {
                if (strncmp(line, "stats", 5) == 0)
                    stats();
                memmove(line, nl + 1, have - (size_t)(nl + 1 - line) + 1);
                have -= (size_t)(nl + 1 - line);
            }
            if (have == sizeof(line) - 1)
                have = 0;
        }
    }
    stats();
    return 0;
}
