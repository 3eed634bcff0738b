/*
 * A Sigil sensor in C on Linux: boots from a state directory, registers with `sigil server`
 * over UDP and publishes signed readings; `sigil app` verifies them end to end.
 *
 *   sensor --state DIR --print-identity        first boot: make the key, print the identity
 *   sensor --state DIR --server 127.0.0.1:5683 [--count N] [--interval-ms MS]
 *   sensor --state DIR --server 127.0.0.1:5684 --psk IDENTITY:HEXKEY ...
 *
 * With --psk the sensor speaks coaps://: every CoAP datagram of the device travels in one
 * DTLS 1.2 record (TLS_PSK_WITH_AES_128_CCM_8) of the library's DTLS client, with the
 * pre-shared key `sigil provision psk` gave the identity (the device's, in hex).
 *
 * The library does no I/O: this file owns the socket, the clock, the files and the
 * randomness, and moves datagrams between the socket and the device. docs/c-api.md walks
 * through it.
 */
#define _GNU_SOURCE
#include "sigil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- the platform: randomness and storage (one file per record in the state directory) */

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

static void record_path(const char *dir, uint32_t slot, char *out, size_t cap) {
  snprintf(out, cap, "%s/%s", dir, slot == SIGIL_SLOT_KEY ? "key" : "sequence");
}

static int32_t file_read(void *ctx, uint32_t slot, uint8_t *buf, size_t cap) {
  char path[4096];
  record_path(ctx, slot, path, sizeof path);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return errno == ENOENT ? 0 : -1;
  ssize_t n = read(fd, buf, cap);
  close(fd);
  return n < 0 ? -1 : (int32_t)n;
}

/* Durable: write a temporary file, fsync it, rename it over the record. */
static int32_t file_write(void *ctx, uint32_t slot, const uint8_t *buf, size_t len) {
  char path[4096], tmp[4200];
  record_path(ctx, slot, path, sizeof path);
  if (len == 0) return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return -1;
  int ok = write(fd, buf, len) == (ssize_t)len && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  return ok && rename(tmp, path) == 0 ? 0 : -1;
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void die(const char *what, sigil_status s) {
  fprintf(stderr, "sensor: %s failed: status %d\n", what, (int)s);
  exit(2);
}

/* ---- coaps://: the DTLS client between the device and the socket */

static int use_dtls;
static sigil_dtls_client dtls; /* SIGIL_DTLS_CLIENT_SIZE bytes, no heap */
static sigil_dtls_config dtls_cfg;
static uint8_t psk_identity[SIGIL_DTLS_MAX_PSK_IDENTITY], psk[SIGIL_DTLS_MAX_PSK];

static int hex_digit(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* --psk IDENTITY:HEXKEY */
static int parse_psk(const char *arg) {
  const char *colon = strchr(arg, ':');
  size_t id_len = colon ? (size_t)(colon - arg) : 0, hex_len = colon ? strlen(colon + 1) : 0;
  if (id_len == 0 || id_len > sizeof psk_identity || hex_len % 2 || hex_len / 2 < 16 ||
      hex_len / 2 > sizeof psk)
    return -1;
  memcpy(psk_identity, arg, id_len);
  for (size_t i = 0; i < hex_len / 2; i++) {
    int hi = hex_digit(colon[1 + 2 * i]), lo = hex_digit(colon[2 + 2 * i]);
    if (hi < 0 || lo < 0) return -1;
    psk[i] = (uint8_t)(hi << 4 | lo);
  }
  sigil_dtls_config_default(&dtls_cfg);
  dtls_cfg.psk_identity = psk_identity;
  dtls_cfg.psk_identity_len = id_len;
  dtls_cfg.psk = psk;
  dtls_cfg.psk_len = hex_len / 2;
  return 0;
}

/* Sends what the DTLS client has queued (handshake flights, records, alerts). */
static void dtls_flush(int sock) {
  uint8_t rec[SIGIL_DTLS_MAX_DATAGRAM];
  size_t len;
  while (sigil_dtls_poll_transmit(&dtls, now_ms(), rec, sizeof rec, &len) == SIGIL_OK && len > 0)
    if (send(sock, rec, len, 0) < 0 && errno != ECONNREFUSED) perror("sensor: send");
}

/* A new handshake (at start, or after the server ended the session). */
static void dtls_connect(int sock, sigil_platform *platform) {
  sigil_status s = sigil_dtls_connect(&dtls, sizeof dtls, &dtls_cfg, platform, now_ms());
  if (s != SIGIL_OK) die("DTLS connect", s);
  dtls_flush(sock);
}

static int dtls_established(void) {
  sigil_dtls_info info;
  return sigil_dtls_get_info(&dtls, &info) == SIGIL_OK && info.established;
}

int main(int argc, char **argv) {
  const char *state = NULL, *server = "127.0.0.1:5683";
  int print_identity = 0;
  long count = 5, interval_ms = 200;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--state") && i + 1 < argc) state = argv[++i];
    else if (!strcmp(argv[i], "--server") && i + 1 < argc) server = argv[++i];
    else if (!strcmp(argv[i], "--count") && i + 1 < argc) count = atol(argv[++i]);
    else if (!strcmp(argv[i], "--interval-ms") && i + 1 < argc) interval_ms = atol(argv[++i]);
    else if (!strcmp(argv[i], "--print-identity")) print_identity = 1;
    else if (!strcmp(argv[i], "--psk") && i + 1 < argc && parse_psk(argv[i + 1]) == 0) use_dtls = 1, i++;
    else {
      fprintf(stderr, "usage: sensor --state DIR [--print-identity] [--server IP:PORT] "
                      "[--count N] [--interval-ms MS] [--psk IDENTITY:HEXKEY]\n");
      return 2;
    }
  }
  if (!state) die("--state", SIGIL_ERR_NULL);
  mkdir(state, 0700);

  /* Boot: the key comes from the state directory or is made now (first boot). */
  static sigil_device dev; /* SIGIL_DEVICE_SIZE bytes, no heap */
  sigil_platform platform = {os_random, file_read, file_write, (void *)state};
  sigil_device_config cfg;
  sigil_status s;
  sigil_device_config_default(&cfg);
  if ((s = sigil_device_boot(&dev, sizeof dev, &cfg, &platform, NULL, 0, NULL, 0)) != SIGIL_OK)
    die("boot", s);
  uint8_t id[SIGIL_IDENTITY_LEN];
  char hex[SIGIL_HEX_BUF], label[SIGIL_LABEL_BUF];
  sigil_device_identity(&dev, id, sizeof id);
  sigil_identity_format(id, sizeof id, SIGIL_FORM_HEX, hex, sizeof hex);
  sigil_identity_format(id, sizeof id, SIGIL_FORM_LABEL, label, sizeof label);
  if (print_identity) {
    printf("%s\n%s\n", hex, label);
    sigil_device_end(&dev);
    return 0;
  }
  fprintf(stderr, "sensor %s (%s)\n", label, hex);

  /* The socket: connected to the server, so recv only sees its datagrams. */
  char host[64];
  const char *colon = strrchr(server, ':');
  if (!colon || (size_t)(colon - server) >= sizeof host) die("--server", SIGIL_ERR_BAD_ARGUMENT);
  memcpy(host, server, (size_t)(colon - server));
  host[colon - server] = 0;
  struct sockaddr_in addr = {0};
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)atoi(colon + 1));
  if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) die("--server", SIGIL_ERR_BAD_ARGUMENT);
  int sock = socket(AF_INET, SOCK_DGRAM, 0);
  if (sock < 0 || connect(sock, (struct sockaddr *)&addr, sizeof addr) != 0) {
    perror("sensor: socket");
    return 2;
  }

  if (use_dtls) dtls_connect(sock, &platform);

  long published = 0, acknowledged = 0, failed = 0;
  uint64_t next_reading = 0, deadline = now_ms() + 30000u + (uint64_t)(count * interval_ms);
  uint8_t buf[SIGIL_MAX_DATAGRAM];
  while (acknowledged + failed < count && now_ms() < deadline) {
    uint64_t now = now_ms(), wake;
    sigil_device_poll_timeout(&dev, &wake);
    if (wake <= now && (s = sigil_device_handle_timeout(&dev, now)) != SIGIL_OK) die("timeout", s);
    if (use_dtls) {
      sigil_dtls_poll_timeout(&dtls, &wake);
      if (wake <= now && sigil_dtls_handle_timeout(&dtls, now) != SIGIL_OK) {
        fprintf(stderr, "sensor: DTLS handshake timed out; connecting again\n");
        dtls_connect(sock, &platform);
      }
      dtls_flush(sock);
    }

    /* A reading when one is due and the device can take it. */
    sigil_device_info info;
    sigil_device_get_info(&dev, &info);
    if (info.can_publish && published < count && now >= next_reading) {
      double t = 20.0 + (double)published / 10.0;
      sigil_record recs[2] = {{"t", "Cel", t}, {"h", "%RH", 40.0 + (double)published}};
      uint64_t seq;
      s = sigil_device_publish(&dev, now, recs, 2, (int64_t)time(NULL), &seq);
      if (s != SIGIL_OK) die("publish", s);
      published++;
      next_reading = now + (uint64_t)interval_ms;
      printf("published %llu\n", (unsigned long long)seq);
    }

    /* Everything the device has to send (over DTLS: once the handshake is done, one record
     * per datagram; until then it stays queued in the device). */
    size_t len;
    while ((!use_dtls || dtls_established()) &&
           (s = sigil_device_poll_transmit(&dev, buf, sizeof buf, &len)) == SIGIL_OK && len > 0) {
      if (use_dtls) {
        if ((s = sigil_dtls_send(&dtls, buf, len)) != SIGIL_OK) die("DTLS send", s);
        dtls_flush(sock);
      } else if (send(sock, buf, len, 0) < 0 && errno != ECONNREFUSED) {
        perror("sensor: send");
      }
    }

    /* What happened. */
    sigil_event ev;
    while (sigil_device_poll_event(&dev, &ev) == SIGIL_OK && ev.kind != SIGIL_EVENT_NONE) {
      switch (ev.kind) {
      case SIGIL_EVENT_REGISTERED:
        fprintf(stderr, "sensor: registered\n");
        break;
      case SIGIL_EVENT_ACKNOWLEDGED:
        acknowledged++;
        printf("acknowledged %llu\n", (unsigned long long)ev.seq);
        break;
      case SIGIL_EVENT_REJECTED:
      case SIGIL_EVENT_TIMED_OUT:
        failed++;
        printf("failed %llu (event %d, code %d)\n", (unsigned long long)ev.seq, (int)ev.kind, ev.code);
        break;
      default:
        fprintf(stderr, "sensor: event %d\n", (int)ev.kind);
      }
    }
    fflush(stdout);

    /* Sleep until a datagram, the device's next timer or the next reading. */
    sigil_device_poll_timeout(&dev, &wake);
    if (published < count && next_reading < wake) wake = next_reading;
    if (use_dtls) {
      uint64_t dtls_wake;
      sigil_dtls_poll_timeout(&dtls, &dtls_wake);
      if (dtls_wake < wake) wake = dtls_wake;
    }
    now = now_ms();
    int timeout = wake <= now ? 0 : wake - now > 1000 ? 1000 : (int)(wake - now);
    struct pollfd pfd = {sock, POLLIN, 0};
    if (poll(&pfd, 1, timeout) > 0) {
      uint8_t rec[SIGIL_DTLS_MAX_DATAGRAM];
      ssize_t n = recv(sock, rec, use_dtls ? sizeof rec : sizeof buf, 0);
      if (n > 0 && !use_dtls && (s = sigil_device_handle_datagram(&dev, now_ms(), rec, (size_t)n)) != SIGIL_OK)
        die("datagram", s);
      if (n > 0 && use_dtls) {
        /* A record in, the CoAP datagrams it carried out to the device. */
        sigil_status ds = sigil_dtls_handle_datagram(&dtls, now_ms(), rec, (size_t)n);
        dtls_flush(sock);
        uint8_t app[SIGIL_DTLS_MAX_APP_DATA];
        while (sigil_dtls_recv(&dtls, app, sizeof app, &len) == SIGIL_OK && len > 0)
          if ((s = sigil_device_handle_datagram(&dev, now_ms(), app, len)) != SIGIL_OK) die("datagram", s);
        if (ds == SIGIL_ERR_DTLS_FAILED) {
          fprintf(stderr, "sensor: the DTLS session ended; connecting again\n");
          dtls_connect(sock, &platform);
        } else if (ds != SIGIL_OK) {
          die("DTLS datagram", ds);
        }
      }
    }
  }
  if (use_dtls) {
    if (sigil_dtls_close(&dtls) == SIGIL_OK) dtls_flush(sock); /* close_notify */
    sigil_dtls_end(&dtls);
  }
  close(sock);
  sigil_device_end(&dev);
  fprintf(stderr, "sensor: %ld acknowledged, %ld failed of %ld\n", acknowledged, failed, count);
  return acknowledged == count ? 0 : 1;
}
