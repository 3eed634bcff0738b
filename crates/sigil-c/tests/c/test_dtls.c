/* Every sigil_dtls_* function of sigil.h given NULL pointers, short buffers and bad lengths:
 * each must answer its documented sigil_status, never crash. Then the client alone, with no
 * server: its ClientHello on the wire, garbage counted and dropped, retransmissions with a
 * doubling timeout, and the handshake failing when they are used up. The handshake with a
 * real server is in tests/dtls.rs (Sigil's server, OpenSSL's). Run by tests/c_api.rs under
 * AddressSanitizer and UndefinedBehaviorSanitizer. */
#include "sigil.h"
#include "check.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* A deterministic generator (a test, not a device). */
static int fail_rng;
static uint8_t counter;
static int32_t test_rng(void *ctx, uint8_t *buf, size_t len) {
  (void)ctx;
  if (fail_rng) return -1;
  for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)(counter++ * 37u + 11u);
  return 0;
}

static const uint8_t IDENTITY[] = "sensor-1";
static const uint8_t KEY[16] = "0123456789abcdef";
static const uint8_t SERVER_ID[SIGIL_IDENTITY_LEN] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const uint8_t P256_SECRET[SIGIL_SECRET_KEY_LEN] = {
    0xc9, 0xaf, 0xa9, 0xd8, 0x45, 0xba, 0x75, 0x16, 0x6b, 0x5c, 0x21, 0x57, 0x67, 0xb1, 0xd6, 0x93,
    0x4e, 0x50, 0xc3, 0xdb, 0x36, 0xe8, 0x9b, 0x12, 0x7b, 0x8a, 0x62, 0x2b, 0x12, 0x0f, 0x67, 0x21};

static sigil_dtls_config psk_config(void) {
  sigil_dtls_config cfg;
  sigil_dtls_config_default(&cfg);
  cfg.psk_identity = IDENTITY;
  cfg.psk_identity_len = sizeof IDENTITY - 1;
  cfg.psk = KEY;
  cfg.psk_len = sizeof KEY;
  return cfg;
}

static void arguments(void) {
  static sigil_dtls_client c;
  sigil_platform p = {test_rng, NULL, NULL, NULL};
  sigil_platform no_rng = {NULL, NULL, NULL, NULL};
  sigil_dtls_config cfg = psk_config(), bad;
  sigil_dtls_info info;
  uint8_t buf[SIGIL_DTLS_MAX_DATAGRAM], app[SIGIL_DTLS_MAX_APP_DATA + 1];
  uint8_t long_id[SIGIL_DTLS_MAX_PSK_IDENTITY + 1], long_key[SIGIL_DTLS_MAX_PSK + 1];
  size_t len = 0;
  uint64_t at = 0;
  memset(app, 'a', sizeof app);
  memset(long_id, 'i', sizeof long_id);
  memset(long_key, 'k', sizeof long_key);

  struct aligned { char c; sigil_dtls_client d; };
  TRUE(sizeof c == SIGIL_DTLS_CLIENT_SIZE && offsetof(struct aligned, d) == 8);
  EXPECT(sigil_dtls_config_default(NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_config_default(&bad), SIGIL_OK);
  TRUE(bad.suite == SIGIL_DTLS_PSK_CCM8 && bad.initial_timeout_ms == 1000 && bad.max_timeout_ms == 60000 &&
       bad.max_retransmissions == 7 && bad.pmtu == 1152 && !bad.connection_id && bad.psk == NULL);

  /* Not connected: every call says so, get_info says idle, end does nothing. */
  memset(&c, 0, sizeof c);
  EXPECT(sigil_dtls_handle_datagram(&c, 0, buf, 4), SIGIL_ERR_DTLS_NOT_CONNECTED);
  EXPECT(sigil_dtls_poll_transmit(&c, 0, buf, sizeof buf, &len), SIGIL_ERR_DTLS_NOT_CONNECTED);
  EXPECT(sigil_dtls_poll_timeout(&c, &at), SIGIL_ERR_DTLS_NOT_CONNECTED);
  EXPECT(sigil_dtls_handle_timeout(&c, 0), SIGIL_ERR_DTLS_NOT_CONNECTED);
  EXPECT(sigil_dtls_send(&c, app, 4), SIGIL_ERR_DTLS_NOT_CONNECTED);
  EXPECT(sigil_dtls_recv(&c, app, sizeof app, &len), SIGIL_ERR_DTLS_NOT_CONNECTED);
  EXPECT(sigil_dtls_close(&c), SIGIL_ERR_DTLS_NOT_CONNECTED);
  EXPECT(sigil_dtls_get_info(&c, &info), SIGIL_OK);
  TRUE(info.state == SIGIL_DTLS_IDLE && !info.established);
  EXPECT(sigil_dtls_get_info(&c, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_get_info(NULL, &info), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_end(&c), SIGIL_OK);
  EXPECT(sigil_dtls_end(NULL), SIGIL_ERR_NULL);

  /* connect's arguments. */
  EXPECT(sigil_dtls_connect(NULL, sizeof c, &cfg, &p, 0), SIGIL_ERR_NULL);
  size_t need = 0;
  EXPECT(sigil_dtls_client_size(&need), SIGIL_OK);
  TRUE(need > 0 && need <= SIGIL_DTLS_CLIENT_SIZE);
  EXPECT(sigil_dtls_client_size(NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_connect(&c, need - 1, &cfg, &p, 0), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_dtls_connect(&c, 0, &cfg, &p, 0), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_dtls_connect(&c, sizeof c, NULL, &p, 0), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_connect(&c, sizeof c, &cfg, NULL, 0), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_connect(&c, sizeof c, &cfg, &no_rng, 0), SIGIL_ERR_NULL);
  bad = cfg; bad.psk_identity = NULL;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &bad, &p, 0), SIGIL_ERR_NULL);
  bad = cfg; bad.psk = NULL;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &bad, &p, 0), SIGIL_ERR_NULL);
  bad = cfg; bad.psk_identity_len = 0;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &bad, &p, 0), SIGIL_ERR_BAD_LENGTH);
  bad = cfg; bad.psk_identity = long_id; bad.psk_identity_len = sizeof long_id;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &bad, &p, 0), SIGIL_ERR_BAD_LENGTH);
  bad = cfg; bad.psk_len = 0;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &bad, &p, 0), SIGIL_ERR_BAD_LENGTH);
  bad = cfg; bad.psk = long_key; bad.psk_len = sizeof long_key;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &bad, &p, 0), SIGIL_ERR_BAD_LENGTH);
  bad = cfg; bad.suite = 0;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &bad, &p, 0), SIGIL_ERR_BAD_ARGUMENT);
  bad = cfg; bad.suite = 4;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &bad, &p, 0), SIGIL_ERR_BAD_ARGUMENT);
  bad = cfg; bad.initial_timeout_ms = 0;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &bad, &p, 0), SIGIL_ERR_CONFIG);
  bad = cfg; bad.max_timeout_ms = bad.initial_timeout_ms - 1;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &bad, &p, 0), SIGIL_ERR_CONFIG);
  bad = cfg; bad.pmtu = 255;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &bad, &p, 0), SIGIL_ERR_CONFIG);
  bad = cfg; bad.pmtu = SIGIL_DTLS_MAX_DATAGRAM + 1;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &bad, &p, 0), SIGIL_ERR_CONFIG);
  /* ECDHE-ECDSA: the server's identity is required; an own key is optional but checked. */
  bad = cfg; bad.suite = SIGIL_DTLS_ECDHE_ECDSA_CCM8;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &bad, &p, 0), SIGIL_ERR_NULL);
  bad.server_identity = SERVER_ID;
  bad.own_secret = P256_SECRET; bad.own_alg = 9;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &bad, &p, 0), SIGIL_ERR_BAD_ARGUMENT);
  bad.own_alg = SIGIL_ALG_ECDSA_P256;
  static const uint8_t ZERO[SIGIL_SECRET_KEY_LEN] = {0};
  bad.own_secret = ZERO; /* not a P-256 scalar */
  EXPECT(sigil_dtls_connect(&c, sizeof c, &bad, &p, 0), SIGIL_ERR_INVALID_KEY);
  fail_rng = 1;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &cfg, &p, 0), SIGIL_ERR_RNG);
  fail_rng = 0;
  EXPECT(sigil_dtls_get_info(&c, &info), SIGIL_OK);
  TRUE(info.state == SIGIL_DTLS_IDLE); /* nothing refused left a state behind */

  /* Connected, handshaking: the per-call arguments. */
  EXPECT(sigil_dtls_connect(&c, sizeof c, &cfg, &p, 0), SIGIL_OK);
  EXPECT(sigil_dtls_poll_transmit(&c, 0, buf, SIGIL_DTLS_MAX_DATAGRAM - 1, &len), SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_dtls_poll_transmit(&c, 0, NULL, sizeof buf, &len), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_poll_transmit(&c, 0, buf, sizeof buf, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_poll_transmit(NULL, 0, buf, sizeof buf, &len), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_handle_datagram(&c, 0, NULL, 4), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_handle_datagram(&c, 0, buf, 0), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_dtls_handle_datagram(NULL, 0, buf, 4), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_poll_timeout(&c, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_poll_timeout(NULL, &at), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_handle_timeout(NULL, 0), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_send(&c, app, 4), SIGIL_ERR_DTLS_NOT_ESTABLISHED);
  EXPECT(sigil_dtls_send(&c, NULL, 4), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_send(&c, app, 0), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_dtls_send(&c, app, SIGIL_DTLS_MAX_APP_DATA + 1), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_dtls_send(NULL, app, 4), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_recv(&c, app, SIGIL_DTLS_MAX_APP_DATA - 1, &len), SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_dtls_recv(&c, NULL, sizeof app, &len), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_recv(&c, app, sizeof app, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_recv(NULL, app, sizeof app, &len), SIGIL_ERR_NULL);
  EXPECT(sigil_dtls_recv(&c, app, sizeof app, &len), SIGIL_OK);
  TRUE(len == 0);
  EXPECT(sigil_dtls_close(&c), SIGIL_ERR_DTLS_NOT_ESTABLISHED);
  EXPECT(sigil_dtls_close(NULL), SIGIL_ERR_NULL);

  /* Ended: zeroed and no longer connected. */
  EXPECT(sigil_dtls_end(&c), SIGIL_OK);
  EXPECT(sigil_dtls_poll_timeout(&c, &at), SIGIL_ERR_DTLS_NOT_CONNECTED);
  const uint8_t *bytes = (const uint8_t *)&c;
  size_t nonzero = 0;
  for (size_t i = 0; i < sizeof c; i++) nonzero += bytes[i] != 0;
  TRUE(nonzero == 0);
}

/* In memory of exactly the size this build needs (AddressSanitizer guards its end). */
static void compact(void) {
  size_t need = 0;
  sigil_platform p = {test_rng, NULL, NULL, NULL};
  sigil_dtls_config cfg = psk_config();
  uint8_t buf[SIGIL_DTLS_MAX_DATAGRAM];
  size_t len = 0;
  uint64_t at = 0;
  EXPECT(sigil_dtls_client_size(&need), SIGIL_OK);
  sigil_dtls_client *c = malloc(need); /* aligned for any type, so to 8 */
  TRUE(c != NULL);
  if (!c) return;
  memset(c, 0, need);
  EXPECT(sigil_dtls_connect(c, need, &cfg, &p, 0), SIGIL_OK);
  EXPECT(sigil_dtls_poll_transmit(c, 0, buf, sizeof buf, &len), SIGIL_OK);
  TRUE(len > 0 && buf[0] == 22);
  EXPECT(sigil_dtls_poll_timeout(c, &at), SIGIL_OK);
  EXPECT(sigil_dtls_handle_timeout(c, at), SIGIL_OK);
  EXPECT(sigil_dtls_end(c), SIGIL_OK);
  free(c);
}

/* The client alone: what it sends, what it drops, how it gives up. */
static void alone(void) {
  static sigil_dtls_client c;
  sigil_platform p = {test_rng, NULL, NULL, NULL};
  sigil_dtls_config cfg = psk_config();
  sigil_dtls_info info;
  uint8_t buf[SIGIL_DTLS_MAX_DATAGRAM], hello[SIGIL_DTLS_MAX_DATAGRAM];
  size_t len = 0, hello_len = 0;
  uint64_t at = 0;

  cfg.initial_timeout_ms = 100;
  cfg.max_timeout_ms = 400;
  cfg.max_retransmissions = 3;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &cfg, &p, 1000), SIGIL_OK);
  EXPECT(sigil_dtls_get_info(&c, &info), SIGIL_OK);
  TRUE(info.state == SIGIL_DTLS_HANDSHAKING && !info.established && info.dropped == 0);

  /* One ClientHello: a plaintext handshake record (type 22, DTLS 1.2 = 0xfefd, epoch 0)
   * holding a whole ClientHello (type 1) that offers TLS_PSK_WITH_AES_128_CCM_8 (0xc0a8). */
  EXPECT(sigil_dtls_poll_transmit(&c, 1000, hello, sizeof hello, &hello_len), SIGIL_OK);
  TRUE(hello_len > 13 + 12 && hello[0] == 22 && hello[1] == 0xfe && hello[2] == 0xfd && hello[3] == 0 &&
       hello[4] == 0 && hello[13] == 1);
  int offers_ccm8 = 0;
  for (size_t i = 13 + 12; i + 1 < hello_len; i++) offers_ccm8 |= hello[i] == 0xc0 && hello[i + 1] == 0xa8;
  TRUE(offers_ccm8);
  EXPECT(sigil_dtls_poll_transmit(&c, 1000, buf, sizeof buf, &len), SIGIL_OK);
  TRUE(len == 0);

  /* Garbage and a record of an epoch it has no keys for: dropped and counted, not fatal. */
  EXPECT(sigil_dtls_handle_datagram(&c, 1010, (const uint8_t *)"\x16\xfe", 2), SIGIL_OK);
  uint8_t epoch1[13 + 24] = {23, 0xfe, 0xfd, 0, 1};
  epoch1[12] = 24;
  EXPECT(sigil_dtls_handle_datagram(&c, 1010, epoch1, sizeof epoch1), SIGIL_OK);
  EXPECT(sigil_dtls_get_info(&c, &info), SIGIL_OK);
  TRUE(info.state == SIGIL_DTLS_HANDSHAKING && info.dropped == 2);

  /* No answer: the ClientHello again (same bytes, next record sequence number) after 100,
   * then 200, then 400 (the cap) ms; after the third, the handshake fails. */
  uint64_t expect_at = 1100, step = 100;
  for (int round = 1; round <= 3; round++) {
    EXPECT(sigil_dtls_poll_timeout(&c, &at), SIGIL_OK);
    TRUE(at == expect_at);
    EXPECT(sigil_dtls_handle_timeout(&c, at - 1), SIGIL_OK); /* not due yet: nothing */
    EXPECT(sigil_dtls_poll_transmit(&c, at - 1, buf, sizeof buf, &len), SIGIL_OK);
    TRUE(len == 0);
    EXPECT(sigil_dtls_handle_timeout(&c, at), SIGIL_OK);
    EXPECT(sigil_dtls_poll_transmit(&c, at, buf, sizeof buf, &len), SIGIL_OK);
    TRUE(len == hello_len && memcmp(buf, hello, 10) == 0 && buf[10] == round &&
         memcmp(buf + 11, hello + 11, len - 11) == 0);
    step = step * 2 > 400 ? 400 : step * 2;
    expect_at = at + step;
  }
  EXPECT(sigil_dtls_poll_timeout(&c, &at), SIGIL_OK);
  EXPECT(sigil_dtls_handle_timeout(&c, at), SIGIL_ERR_DTLS_FAILED);
  EXPECT(sigil_dtls_get_info(&c, &info), SIGIL_OK);
  TRUE(info.state == SIGIL_DTLS_FAILED && info.timed_out && !info.alert_from_peer);
  EXPECT(sigil_dtls_poll_timeout(&c, &at), SIGIL_OK);
  TRUE(at == SIGIL_NEVER);
  EXPECT(sigil_dtls_handle_datagram(&c, at, hello, hello_len), SIGIL_ERR_DTLS_FAILED);
  EXPECT(sigil_dtls_send(&c, (const uint8_t *)"x", 1), SIGIL_ERR_DTLS_NOT_ESTABLISHED);

  /* Connecting again over a used state starts afresh. */
  EXPECT(sigil_dtls_connect(&c, sizeof c, &cfg, &p, 5000), SIGIL_OK);
  EXPECT(sigil_dtls_get_info(&c, &info), SIGIL_OK);
  TRUE(info.state == SIGIL_DTLS_HANDSHAKING && info.dropped == 0 && !info.timed_out);
  EXPECT(sigil_dtls_poll_transmit(&c, 5000, buf, sizeof buf, &len), SIGIL_OK);
  TRUE(len > 0 && buf[0] == 22 && buf[10] == 0);

  /* The ECDHE suites offer what they say (0xc0ae ECDHE-ECDSA-CCM8, 0xd003 ECDHE-PSK-CCM8). */
  sigil_dtls_config ec = cfg;
  ec.suite = SIGIL_DTLS_ECDHE_ECDSA_CCM8;
  ec.server_identity = SERVER_ID;
  ec.own_alg = SIGIL_ALG_ECDSA_P256;
  ec.own_secret = P256_SECRET;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &ec, &p, 0), SIGIL_OK);
  EXPECT(sigil_dtls_poll_transmit(&c, 0, buf, sizeof buf, &len), SIGIL_OK);
  int found = 0;
  for (size_t i = 25; i + 1 < len; i++) found |= buf[i] == 0xc0 && buf[i + 1] == 0xae;
  TRUE(found);
  ec = cfg;
  ec.suite = SIGIL_DTLS_ECDHE_PSK_CCM8;
  EXPECT(sigil_dtls_connect(&c, sizeof c, &ec, &p, 0), SIGIL_OK);
  EXPECT(sigil_dtls_poll_transmit(&c, 0, buf, sizeof buf, &len), SIGIL_OK);
  found = 0;
  for (size_t i = 25; i + 1 < len; i++) found |= buf[i] == 0xd0 && buf[i + 1] == 0x03;
  TRUE(found);
  EXPECT(sigil_dtls_end(&c), SIGIL_OK);
}

int main(void) {
  arguments();
  compact();
  alone();
  return REPORT();
}
