/*
 * A CryptoDiet node in C on Linux: the seed's three phases (signed hellos, ECDH + HKDF, then
 * messages encrypted with AES-128-CCM-8 and signed with ECDSA) with its neighbours over UDP.
 * A configured neighbour list stands in for the routing table, in the format `sigil diet`
 * takes, and the state directory is laid out as `sigil diet` lays it out, so a C node and a
 * Rust node are configured alike and talk to each other.
 *
 *   diet-node --state DIR --print-identity     make the keys if needed, print the identity
 *   diet-node --state DIR --listen 127.0.0.1:5700 --neighbour ADDR=IDENTITY ...
 *             [--neighbours-file FILE] [--interval-ms 5000] [--message 'message {n}']
 *             [--duration-ms MS] [--hello-timeout-ms 1000]
 *
 * A neighbour is `ADDR=IDENTITY` (32 hex digits) or `ADDR=p256:HEX` (its uncompressed
 * signing key); a neighbours file has one per line (`ADDR=WHO` or `ADDR WHO`, `#` comments).
 * IPv4 addresses only. Every interval each established neighbour gets a message; verified
 * messages are printed, so are refusals, and the counters at the end.
 *
 * The library does no I/O: this file owns the socket, the clock, the files and the
 * randomness. docs/c-api.md ("CryptoDiet") walks through it.
 */
#define _GNU_SOURCE
#include "sigil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_MESSAGE 1024

/* ---- the platform: randomness, the clock, the state directory */

static int32_t os_random(void *ctx, uint8_t *buf, size_t len) {
  (void)ctx;
  while (len > 0) {
    ssize_t n = getrandom(buf, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    buf += n;
    len -= (size_t)n;
  }
  return 0;
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "diet-node: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(2);
}

static void check(const char *what, sigil_status s) {
  if (s != SIGIL_OK) {
    char code[32];
    snprintf(code, sizeof code, "status %d", (int)s);
    fail(what, code);
  }
}

static int unhex(const char *text, uint8_t *out, size_t len) {
  if (strlen(text) != 2 * len) return -1;
  for (size_t i = 0; i < len; i++) {
    unsigned v;
    if (sscanf(text + 2 * i, "%2x", &v) != 1) return -1;
    out[i] = (uint8_t)v;
  }
  return 0;
}

static void hex(const uint8_t *in, size_t len, char *out) {
  for (size_t i = 0; i < len; i++) sprintf(out + 2 * i, "%02x", in[i]);
}

/* Durable: write a temporary file, fsync it, rename it over the old one. */
static void write_private(const char *dir, const char *name, const char *text) {
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) fail("cannot write", tmp);
  size_t len = strlen(text);
  int ok = write(fd, text, len) == (ssize_t)len && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) fail("cannot write", path);
}

/* The two secret scalars (`diet-keys`: `ecdh HEX` and `signing HEX` lines), made on first use
 * with the seed's ECC_GenKeyPair. */
static void load_or_make_keys(const char *dir, uint8_t ecdh[32], uint8_t signing[32]) {
  char path[4096], line[256];
  snprintf(path, sizeof path, "%s/diet-keys", dir);
  FILE *f = fopen(path, "r");
  if (f) {
    int have = 0;
    while (fgets(line, sizeof line, f)) {
      char name[16], value[80];
      if (sscanf(line, "%15s %79s", name, value) != 2) fail("key file: expected NAME HEX lines", path);
      uint8_t *dst = !strcmp(name, "ecdh") ? ecdh : !strcmp(name, "signing") ? signing : NULL;
      if (!dst || unhex(value, dst, 32) != 0) fail("key file: bad line", line);
      have |= dst == ecdh ? 1 : 2;
    }
    fclose(f);
    if (have != 3) fail("key file needs an ecdh and a signing line", path);
    return;
  }
  sigil_platform platform = {os_random, NULL, NULL, NULL};
  uint8_t pub[SIGIL_DIET_PUBLIC_KEY_LEN];
  check("ECC_GenKeyPair", sigil_diet_gen_key_pair(&platform, ecdh, 32, pub, sizeof pub));
  check("ECC_GenKeyPair", sigil_diet_gen_key_pair(&platform, signing, 32, pub, sizeof pub));
  char text[200], e[65], s[65];
  hex(ecdh, 32, e);
  hex(signing, 32, s);
  snprintf(text, sizeof text, "ecdh %s\nsigning %s\n", e, s);
  write_private(dir, "diet-keys", text);
  memset(text, 0, sizeof text);
}

/* Raises the stored epoch (`diet-epoch`) and returns it: each run's keys differ. */
static uint32_t next_epoch(const char *dir) {
  char path[4096], text[32];
  unsigned long old = 0;
  snprintf(path, sizeof path, "%s/diet-epoch", dir);
  FILE *f = fopen(path, "r");
  if (f) {
    if (fscanf(f, "%lu", &old) != 1) fail("not a number", path);
    fclose(f);
  }
  if (old >= 0xFFFFFFFFul) fail("epoch exhausted: make new keys", path);
  snprintf(text, sizeof text, "%lu\n", old + 1);
  write_private(dir, "diet-epoch", text);
  return (uint32_t)(old + 1);
}

/* ---- the neighbour list */

struct neighbour {
  struct sockaddr_in addr;
  uint8_t id[SIGIL_IDENTITY_LEN];
  char name[64];   /* ADDR, for printing */
  char id_hex[SIGIL_HEX_BUF];
  uint32_t handle; /* the node's handle */
};

static struct neighbour neighbours[SIGIL_DIET_MAX_NEIGHBOURS];
static size_t neighbour_count;

static int parse_addr(const char *text, struct sockaddr_in *out) {
  char host[64];
  const char *colon = strrchr(text, ':');
  if (!colon || (size_t)(colon - text) >= sizeof host) return -1;
  memcpy(host, text, (size_t)(colon - text));
  host[colon - text] = 0;
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (*end || port <= 0 || port > 65535) return -1;
  memset(out, 0, sizeof *out);
  out->sin_family = AF_INET;
  out->sin_port = htons((uint16_t)port);
  return inet_pton(AF_INET, host, &out->sin_addr) == 1 ? 0 : -1;
}

/* `ADDR=IDENTITY` or `ADDR=p256:HEX`, as `sigil diet --neighbour` takes. */
static void add_neighbour_spec(const char *spec) {
  char buf[512];
  if (strlen(spec) >= sizeof buf) fail("neighbour too long", spec);
  strcpy(buf, spec);
  char *eq = strchr(buf, '=');
  if (!eq) fail("neighbour: expected ADDR=IDENTITY or ADDR=p256:HEX", spec);
  *eq = 0;
  if (neighbour_count == SIGIL_DIET_MAX_NEIGHBOURS) fail("too many neighbours", spec);
  struct neighbour *n = &neighbours[neighbour_count];
  if (parse_addr(buf, &n->addr) != 0) fail("neighbour: bad IPv4 address", spec);
  snprintf(n->name, sizeof n->name, "%s:%u", inet_ntoa(n->addr.sin_addr), (unsigned)ntohs(n->addr.sin_port));
  const char *who = eq + 1;
  if (!strncmp(who, "p256:", 5)) {
    uint8_t key[SIGIL_DIET_PUBLIC_KEY_LEN];
    sigil_key k = {SIGIL_ALG_ECDSA_P256, key, sizeof key};
    if (unhex(who + 5, key, sizeof key) != 0) fail("neighbour: a p256 key is 130 hex digits", spec);
    check("neighbour key", sigil_identity_of_key(&k, NULL, 0, n->id, sizeof n->id));
  } else {
    check("neighbour identity", sigil_identity_parse(who, strlen(who), n->id, sizeof n->id));
  }
  sigil_identity_format(n->id, sizeof n->id, SIGIL_FORM_HEX, n->id_hex, sizeof n->id_hex);
  neighbour_count++;
}

static void read_neighbours_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) fail("cannot read neighbour file", path);
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char addr[256], who[256], spec[513];
    if (strchr(line, '=')) {
      if (sscanf(line, " %511s", spec) == 1) add_neighbour_spec(spec);
    } else if (sscanf(line, "%255s %255s", addr, who) == 2) {
      snprintf(spec, sizeof spec, "%s=%s", addr, who);
      add_neighbour_spec(spec);
    } else if (sscanf(line, "%255s", addr) == 1) {
      fail("neighbour file: not ADDR=IDENTITY", line);
    }
  }
  fclose(f);
}

static const char *reason(sigil_diet_refusal r) {
  switch (r) {
  case SIGIL_DIET_REFUSED_MALFORMED: return "malformed";
  case SIGIL_DIET_REFUSED_UNTRUSTED: return "untrusted";
  case SIGIL_DIET_REFUSED_REFLECTED: return "reflected";
  case SIGIL_DIET_REFUSED_BAD_SIGNATURE: return "bad-signature";
  case SIGIL_DIET_REFUSED_BAD_TAG: return "bad-tag";
  case SIGIL_DIET_REFUSED_NO_SESSION: return "no-session";
  case SIGIL_DIET_REFUSED_REPLAY: return "replay";
  case SIGIL_DIET_REFUSED_STALE_HELLO: return "stale-hello";
  case SIGIL_DIET_REFUSED_TABLE_FULL: return "table-full";
  case SIGIL_DIET_REFUSED_BUDGET: return "over-budget";
  default: return "other";
  }
}

static volatile sig_atomic_t stop;
static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

/* `message {n}` with `{n}` replaced by the message number. */
static size_t format_message(const char *tmpl, unsigned long n, char *out, size_t cap) {
  const char *at = strstr(tmpl, "{n}");
  int len = at ? snprintf(out, cap, "%.*s%lu%s", (int)(at - tmpl), tmpl, n, at + 3)
               : snprintf(out, cap, "%s", tmpl);
  return len < 0 ? 0 : (size_t)len >= cap ? cap - 1 : (size_t)len;
}

int main(int argc, char **argv) {
  const char *state = NULL, *listen = "127.0.0.1:5700", *message = "message {n}";
  long interval_ms = 5000, duration_ms = -1, hello_timeout_ms = 1000;
  int print_identity = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--state") && i + 1 < argc) state = argv[++i];
    else if (!strcmp(argv[i], "--print-identity")) print_identity = 1;
    else if (!strcmp(argv[i], "--listen") && i + 1 < argc) listen = argv[++i];
    else if (!strcmp(argv[i], "--neighbour") && i + 1 < argc) add_neighbour_spec(argv[++i]);
    else if (!strcmp(argv[i], "--neighbours-file") && i + 1 < argc) read_neighbours_file(argv[++i]);
    else if (!strcmp(argv[i], "--interval-ms") && i + 1 < argc) interval_ms = atol(argv[++i]);
    else if (!strcmp(argv[i], "--message") && i + 1 < argc) message = argv[++i];
    else if (!strcmp(argv[i], "--duration-ms") && i + 1 < argc) duration_ms = atol(argv[++i]);
    else if (!strcmp(argv[i], "--hello-timeout-ms") && i + 1 < argc) hello_timeout_ms = atol(argv[++i]);
    else {
      fprintf(stderr, "usage: diet-node --state DIR [--print-identity] [--listen IP:PORT] "
                      "[--neighbour ADDR=IDENTITY|ADDR=p256:HEX]... [--neighbours-file FILE] "
                      "[--interval-ms MS] [--message TEXT] [--duration-ms MS] "
                      "[--hello-timeout-ms MS]\n");
      return 2;
    }
  }
  if (!state) fail("--state is required", NULL);
  if (interval_ms <= 0 || hello_timeout_ms <= 0 || hello_timeout_ms > 32000)
    fail("--interval-ms and --hello-timeout-ms must be above zero (the latter at most 32000)", NULL);
  if (strlen(message) > MAX_MESSAGE) fail("--message is too long", NULL);
  mkdir(state, 0700);

  /* Phase 0: the node's two key pairs and this run's epoch. */
  uint8_t ecdh[32], signing[32], id[SIGIL_IDENTITY_LEN];
  char id_hex[SIGIL_HEX_BUF];
  load_or_make_keys(state, ecdh, signing);
  static sigil_diet_node node; /* SIGIL_DIET_NODE_SIZE bytes, no heap */
  sigil_diet_config cfg;
  sigil_diet_config_default(&cfg);
  cfg.hello_initial_ms = (uint32_t)hello_timeout_ms;
  if (print_identity) {
    check("init", sigil_diet_node_init(&node, sizeof node, ecdh, 32, signing, 32, 0, &cfg));
    check("identity", sigil_diet_node_identity(&node, id, sizeof id));
    sigil_identity_format(id, sizeof id, SIGIL_FORM_HEX, id_hex, sizeof id_hex);
    printf("%s\n", id_hex);
    sigil_diet_node_end(&node);
    return 0;
  }
  if (neighbour_count == 0) fail("give --neighbour or --neighbours-file: a node that trusts nobody talks to nobody", NULL);
  uint32_t epoch = next_epoch(state);
  check("init", sigil_diet_node_init(&node, sizeof node, ecdh, 32, signing, 32, epoch, &cfg));
  memset(ecdh, 0, sizeof ecdh);
  memset(signing, 0, sizeof signing);
  check("identity", sigil_diet_node_identity(&node, id, sizeof id));
  sigil_identity_format(id, sizeof id, SIGIL_FORM_HEX, id_hex, sizeof id_hex);

  struct sockaddr_in me;
  if (parse_addr(listen, &me) != 0) fail("--listen: not an IPv4 address", listen);
  int sock = socket(AF_INET, SOCK_DGRAM, 0);
  if (sock < 0 || bind(sock, (struct sockaddr *)&me, sizeof me) != 0) fail("cannot listen on", listen);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("node %s (epoch %lu) on %s\n", id_hex, (unsigned long)epoch, listen);

  /* The routing table: each neighbour's identity goes into the node, its address stays here. */
  const uint64_t start = now_ms();
  for (size_t i = 0; i < neighbour_count; i++) {
    check("add neighbour", sigil_diet_node_add_neighbour(&node, 0, neighbours[i].id, sizeof neighbours[i].id,
                                                         &neighbours[i].handle));
    for (size_t j = 0; j < i; j++)
      if (neighbours[j].handle == neighbours[i].handle) fail("an identity is listed twice", neighbours[i].name);
  }

  uint64_t next_message = (uint64_t)interval_ms;
  unsigned long sent = 0;
  uint8_t buf[2048], plain[2048];
  while (!stop) {
    uint64_t now = now_ms() - start;
    if (duration_ms >= 0 && now >= (uint64_t)duration_ms) break;

    /* Phase 1: hellos and their answers, as the node schedules them. */
    size_t len;
    uint32_t to;
    while (sigil_diet_node_poll_transmit(&node, now, buf, sizeof buf, &len, &to) == SIGIL_OK && len > 0) {
      for (size_t i = 0; i < neighbour_count; i++)
        if (neighbours[i].handle == to &&
            sendto(sock, buf, len, 0, (struct sockaddr *)&neighbours[i].addr, sizeof neighbours[i].addr) < 0)
          perror("diet-node: send");
    }

    /* Phase 3: a message to every established neighbour each interval. */
    if (now >= next_message) {
      next_message = now + (uint64_t)interval_ms;
      for (size_t i = 0; i < neighbour_count; i++) {
        sigil_diet_phase phase;
        if (sigil_diet_node_phase(&node, neighbours[i].handle, &phase) != SIGIL_OK ||
            phase != SIGIL_DIET_ESTABLISHED)
          continue;
        char text[MAX_MESSAGE + 1];
        size_t n = format_message(message, ++sent, text, sizeof text);
        sigil_status s = sigil_diet_node_send(&node, neighbours[i].handle, (const uint8_t *)text, n, buf,
                                              sizeof buf, &len);
        if (s != SIGIL_OK) {
          fprintf(stderr, "diet-node: cannot seal for %s: status %d\n", neighbours[i].name, (int)s);
          continue;
        }
        if (sendto(sock, buf, len, 0, (struct sockaddr *)&neighbours[i].addr, sizeof neighbours[i].addr) < 0)
          perror("diet-node: send");
      }
    }

    /* Sleep until a datagram, the node's next hello or the next message. */
    uint64_t wake = next_message, at;
    if (sigil_diet_node_poll_timeout(&node, &at) == SIGIL_OK && at < wake) wake = at;
    if (duration_ms >= 0 && (uint64_t)duration_ms < wake) wake = (uint64_t)duration_ms;
    now = now_ms() - start;
    int timeout = wake <= now ? 0 : wake - now > 1000 ? 1000 : (int)(wake - now);
    struct pollfd pfd = {sock, POLLIN, 0};
    if (poll(&pfd, 1, timeout) <= 0) continue;
    struct sockaddr_in from;
    socklen_t from_len = sizeof from;
    ssize_t got = recvfrom(sock, buf, sizeof buf, 0, (struct sockaddr *)&from, &from_len);
    if (got <= 0) continue;

    /* Which neighbour sent it: the address decides; any other is unknown. */
    struct neighbour *sender = NULL;
    for (size_t i = 0; i < neighbour_count; i++)
      if (neighbours[i].addr.sin_addr.s_addr == from.sin_addr.s_addr && neighbours[i].addr.sin_port == from.sin_port)
        sender = &neighbours[i];
    char from_name[64];
    snprintf(from_name, sizeof from_name, "%s:%u", inet_ntoa(from.sin_addr), (unsigned)ntohs(from.sin_port));
    uint32_t handle = sender ? sender->handle : SIGIL_DIET_UNKNOWN_NEIGHBOUR;

    /* Phases 1 to 3 for what arrived: a hello (keys derived: phase 2), or a message. */
    sigil_diet_received r;
    sigil_diet_phase before = SIGIL_DIET_HANDSHAKE;
    if (sender) sigil_diet_node_phase(&node, handle, &before);
    check("handle", sigil_diet_node_handle(&node, now_ms() - start, handle, buf, (size_t)got, plain, sizeof plain, &r));
    switch (r.outcome) {
    case SIGIL_DIET_HELLO:
      if (before != SIGIL_DIET_ESTABLISHED || r.new_keys)
        printf("established with %s (%s)\n", from_name, sender ? sender->id_hex : "?");
      break;
    case SIGIL_DIET_MESSAGE:
      printf("message from %s (%s): %.*s\n", from_name, sender ? sender->id_hex : "?", (int)r.len,
             (const char *)plain);
      break;
    case SIGIL_DIET_REFUSED:
      printf("refused from %s: %s\n", from_name, reason(r.refusal));
      break;
    case SIGIL_DIET_CHALLENGED: /* answered with a challenge; keys follow its echo */
      break;
    }
  }

  sigil_diet_counters c;
  check("counters", sigil_diet_node_counters(&node, &c));
  size_t established = 0;
  for (size_t i = 0; i < neighbour_count; i++) {
    sigil_diet_phase phase;
    if (sigil_diet_node_phase(&node, neighbours[i].handle, &phase) == SIGIL_OK && phase == SIGIL_DIET_ESTABLISHED)
      established++;
  }
  printf("counters: hellos_sent=%llu hellos_accepted=%llu messages_sent=%llu messages_accepted=%llu "
         "malformed=%llu untrusted=%llu reflected=%llu bad_signature=%llu bad_tag=%llu no_session=%llu "
         "replayed=%llu stale_hellos=%llu table_full=%llu other=%llu refused=%llu\n",
         (unsigned long long)c.hellos_sent, (unsigned long long)c.hellos_accepted,
         (unsigned long long)c.messages_sent, (unsigned long long)c.messages_accepted,
         (unsigned long long)c.malformed, (unsigned long long)c.untrusted, (unsigned long long)c.reflected,
         (unsigned long long)c.bad_signature, (unsigned long long)c.bad_tag, (unsigned long long)c.no_session,
         (unsigned long long)c.replayed, (unsigned long long)c.stale_hellos, (unsigned long long)c.table_full,
         (unsigned long long)c.other, (unsigned long long)c.refused);
  printf("%zu of %zu neighbours established\n", established, neighbour_count);
  close(sock);
  sigil_diet_node_end(&node);
  return 0;
}
