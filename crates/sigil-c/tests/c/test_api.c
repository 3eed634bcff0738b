/* Every exported function of sigil.h given NULL pointers, short buffers and bad lengths:
 * each must answer its documented sigil_status, never crash. Run by tests/c_api.rs under
 * AddressSanitizer and UndefinedBehaviorSanitizer. */
#include "sigil.h"
#include "check.h"

#include <stdio.h>
#include <string.h>


/* The platform: storage in RAM, a deterministic generator (a test, not a device). */
struct fake {
  uint8_t key[SIGIL_KEY_RECORD_LEN];
  size_t key_len;
  uint8_t seq[SIGIL_SEQUENCE_RECORD_LEN];
  size_t seq_len;
  uint8_t counter;
  int fail_rng, fail_storage;
};

static int32_t fake_rng(void *ctx, uint8_t *buf, size_t len) {
  struct fake *f = ctx;
  if (f->fail_rng) return -1;
  for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)(f->counter++ * 37u + 11u);
  return 0;
}

static int32_t fake_read(void *ctx, uint32_t slot, uint8_t *buf, size_t cap) {
  struct fake *f = ctx;
  if (f->fail_storage) return -1;
  const uint8_t *src = slot == SIGIL_SLOT_KEY ? f->key : f->seq;
  size_t n = slot == SIGIL_SLOT_KEY ? f->key_len : f->seq_len;
  if (n > cap) return -1;
  memcpy(buf, src, n);
  return (int32_t)n;
}

static int32_t fake_write(void *ctx, uint32_t slot, const uint8_t *buf, size_t len) {
  struct fake *f = ctx;
  if (f->fail_storage) return -1;
  if (slot == SIGIL_SLOT_KEY && len <= sizeof f->key) {
    memcpy(f->key, buf, len);
    f->key_len = len;
  } else if (slot == SIGIL_SLOT_SEQUENCE && len <= sizeof f->seq) {
    memcpy(f->seq, buf, len);
    f->seq_len = len;
  } else {
    return -1;
  }
  return 0;
}

static const uint8_t ED_PUB[32] = {
    /* RFC 8032 section 7.1, test 1 */
    0xd7, 0x5a, 0x98, 0x01, 0x82, 0xb1, 0x0a, 0xb7, 0xd5, 0x4b, 0xfe, 0xd3, 0xc9, 0x64, 0x07, 0x3a,
    0x0e, 0xe1, 0x72, 0xf3, 0xda, 0xa6, 0x23, 0x25, 0xaf, 0x02, 0x1a, 0x68, 0xf7, 0x07, 0x51, 0x1a};
static const uint8_t ED_SECRET[32] = {
    0x9d, 0x61, 0xb1, 0x9d, 0xef, 0xfd, 0x5a, 0x60, 0xba, 0x84, 0x4a, 0xf4, 0x92, 0xec, 0x2c, 0xc4,
    0x44, 0x49, 0xc5, 0x69, 0x7b, 0x32, 0x69, 0x19, 0x70, 0x3b, 0xac, 0x03, 0x1c, 0xae, 0x7f, 0x60};

static void identities(void) {
  sigil_key key = {SIGIL_ALG_ED25519, ED_PUB, sizeof ED_PUB};
  sigil_key bad_alg = {99, ED_PUB, sizeof ED_PUB};
  sigil_key short_key = {SIGIL_ALG_ED25519, ED_PUB, 31};
  sigil_key null_bytes = {SIGIL_ALG_ED25519, NULL, 32};
  sigil_key p256_len = {SIGIL_ALG_ECDSA_P256, ED_PUB, 32};
  uint8_t id[SIGIL_IDENTITY_LEN], id2[SIGIL_IDENTITY_LEN];

  EXPECT(sigil_identity_of_key(&key, NULL, 0, id, sizeof id), SIGIL_OK);
  EXPECT(sigil_identity_of_key(NULL, NULL, 0, id, sizeof id), SIGIL_ERR_NULL);
  EXPECT(sigil_identity_of_key(&key, NULL, 0, NULL, sizeof id), SIGIL_ERR_NULL);
  EXPECT(sigil_identity_of_key(&key, NULL, 3, id, sizeof id), SIGIL_ERR_NULL);
  EXPECT(sigil_identity_of_key(&null_bytes, NULL, 0, id, sizeof id), SIGIL_ERR_NULL);
  EXPECT(sigil_identity_of_key(&key, NULL, 0, id, 15), SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_identity_of_key(&short_key, NULL, 0, id, sizeof id), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_identity_of_key(&p256_len, NULL, 0, id, sizeof id), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_identity_of_key(&bad_alg, NULL, 0, id, sizeof id), SIGIL_ERR_BAD_ARGUMENT);
  EXPECT(sigil_identity_of_key(&key, (const uint8_t *)"room 4", 6, id2, sizeof id2), SIGIL_OK);
  TRUE(memcmp(id, id2, sizeof id) != 0);

  /* A kit of one: the group identity and the member identity differ from I = h(P|O). */
  EXPECT(sigil_identity_of_group(&key, 1, id2, sizeof id2), SIGIL_OK);
  EXPECT(sigil_identity_of_group(&key, 0, id2, sizeof id2), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_identity_of_group(&key, SIGIL_MAX_GROUP + 1, id2, sizeof id2), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_identity_of_group(NULL, 1, id2, sizeof id2), SIGIL_ERR_NULL);
  EXPECT(sigil_identity_of_group(&key, 1, NULL, sizeof id2), SIGIL_ERR_NULL);
  EXPECT(sigil_identity_of_group(&key, 1, id2, 4), SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_identity_of_group(&short_key, 1, id2, sizeof id2), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_identity_of_member(&key, NULL, 0, id2, sizeof id2), SIGIL_OK);
  EXPECT(sigil_identity_of_member(&key, &key, 1, id2, sizeof id2), SIGIL_ERR_CONFIG);
  EXPECT(sigil_identity_of_member(NULL, NULL, 0, id2, sizeof id2), SIGIL_ERR_NULL);
  EXPECT(sigil_identity_of_member(&key, NULL, 1, id2, sizeof id2), SIGIL_ERR_NULL);
  EXPECT(sigil_identity_of_member(&key, &key, SIGIL_MAX_GROUP, id2, sizeof id2), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_identity_of_member(&key, NULL, 0, NULL, 16), SIGIL_ERR_NULL);
  EXPECT(sigil_identity_of_member(&key, NULL, 0, id2, 0), SIGIL_ERR_SHORT_BUFFER);

  /* Label forms, and back. */
  char hex[SIGIL_HEX_BUF], label[SIGIL_LABEL_BUF], shortl[SIGIL_SHORT_LABEL_BUF];
  EXPECT(sigil_identity_format(id, sizeof id, SIGIL_FORM_HEX, hex, sizeof hex), SIGIL_OK);
  TRUE(strlen(hex) == 32);
  EXPECT(sigil_identity_format(id, sizeof id, SIGIL_FORM_LABEL, label, sizeof label), SIGIL_OK);
  TRUE(strlen(label) == 39 && label[4] == '-');
  EXPECT(sigil_identity_format(id, sizeof id, SIGIL_FORM_SHORT, shortl, sizeof shortl), SIGIL_OK);
  TRUE(strlen(shortl) == 8 && strncmp(shortl, label + 30, 4) == 0);
  EXPECT(sigil_identity_format(id, sizeof id, SIGIL_FORM_LABEL, label, sizeof label - 1),
         SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_identity_format(id, sizeof id, SIGIL_FORM_HEX, hex, sizeof hex - 1), SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_identity_format(id, 15, SIGIL_FORM_HEX, hex, sizeof hex), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_identity_format(id, 17, SIGIL_FORM_HEX, hex, sizeof hex), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_identity_format(NULL, 16, SIGIL_FORM_HEX, hex, sizeof hex), SIGIL_ERR_NULL);
  EXPECT(sigil_identity_format(id, sizeof id, SIGIL_FORM_HEX, NULL, sizeof hex), SIGIL_ERR_NULL);
  EXPECT(sigil_identity_format(id, sizeof id, 0, hex, sizeof hex), SIGIL_ERR_BAD_ARGUMENT);
  EXPECT(sigil_identity_parse(label, strlen(label), id2, sizeof id2), SIGIL_OK);
  TRUE(memcmp(id, id2, sizeof id) == 0);
  EXPECT(sigil_identity_parse(hex, strlen(hex), id2, sizeof id2), SIGIL_OK);
  TRUE(memcmp(id, id2, sizeof id) == 0);
  EXPECT(sigil_identity_parse(hex, 31, id2, sizeof id2), SIGIL_ERR_BAD_ARGUMENT);
  EXPECT(sigil_identity_parse("zz", 2, id2, sizeof id2), SIGIL_ERR_BAD_ARGUMENT);
  EXPECT(sigil_identity_parse("\xff\xfe", 2, id2, sizeof id2), SIGIL_ERR_BAD_ARGUMENT);
  EXPECT(sigil_identity_parse(hex, 0, id2, sizeof id2), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_identity_parse(NULL, 32, id2, sizeof id2), SIGIL_ERR_NULL);
  EXPECT(sigil_identity_parse(hex, 32, NULL, 16), SIGIL_ERR_NULL);
  EXPECT(sigil_identity_parse(hex, 32, id2, 15), SIGIL_ERR_SHORT_BUFFER);
}

static void readings(void) {
  uint8_t pub[SIGIL_MAX_PUBLIC_KEY], id[SIGIL_IDENTITY_LEN], senml[128], signed_[SIGIL_MAX_READING];
  size_t pub_len = 0, senml_len = 0, len = 0;

  EXPECT(sigil_key_public(SIGIL_ALG_ED25519, ED_SECRET, 32, pub, sizeof pub, &pub_len), SIGIL_OK);
  TRUE(pub_len == 32 && memcmp(pub, ED_PUB, 32) == 0); /* RFC 8032 7.1 test 1 */
  EXPECT(sigil_key_public(SIGIL_ALG_ED25519, ED_SECRET, 31, pub, sizeof pub, &pub_len), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_key_public(SIGIL_ALG_ED25519, NULL, 32, pub, sizeof pub, &pub_len), SIGIL_ERR_NULL);
  EXPECT(sigil_key_public(SIGIL_ALG_ED25519, ED_SECRET, 32, NULL, sizeof pub, &pub_len), SIGIL_ERR_NULL);
  EXPECT(sigil_key_public(SIGIL_ALG_ED25519, ED_SECRET, 32, pub, sizeof pub, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_key_public(SIGIL_ALG_ED25519, ED_SECRET, 32, pub, 31, &pub_len), SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_key_public(7, ED_SECRET, 32, pub, sizeof pub, &pub_len), SIGIL_ERR_BAD_ARGUMENT);
  EXPECT(sigil_key_public(SIGIL_ALG_ECDSA_P256, ED_SECRET, 32, pub, sizeof pub, &pub_len), SIGIL_OK);
  TRUE(pub_len == 65 && pub[0] == 0x04);

  sigil_key key = {SIGIL_ALG_ED25519, ED_PUB, 32};
  EXPECT(sigil_identity_of_key(&key, NULL, 0, id, sizeof id), SIGIL_OK);

  sigil_record recs[2] = {{"t", "Cel", 21.5}, {"h", "%RH", 40.0}};
  sigil_record bad_utf8[1] = {{"\xc3\x28", NULL, 1.0}};
  EXPECT(sigil_senml_encode(SIGIL_FORMAT_COSE, recs, 2, senml, sizeof senml, &senml_len), SIGIL_OK);
  TRUE(senml_len > 0 && senml[0] == 0x82); /* a CBOR array of two records */
  EXPECT(sigil_senml_encode(SIGIL_FORMAT_COSE, recs, 2, senml, 4, &len), SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_senml_encode(SIGIL_FORMAT_COSE, recs, 0, senml, sizeof senml, &len), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_senml_encode(SIGIL_FORMAT_COSE, recs, SIGIL_MAX_RECORDS + 1, senml, sizeof senml, &len),
         SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_senml_encode(SIGIL_FORMAT_COSE, NULL, 2, senml, sizeof senml, &len), SIGIL_ERR_NULL);
  EXPECT(sigil_senml_encode(SIGIL_FORMAT_COSE, recs, 2, NULL, sizeof senml, &len), SIGIL_ERR_NULL);
  EXPECT(sigil_senml_encode(SIGIL_FORMAT_COSE, recs, 2, senml, sizeof senml, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_senml_encode(SIGIL_FORMAT_COSE, bad_utf8, 1, senml, sizeof senml, &len), SIGIL_ERR_BAD_ARGUMENT);
  EXPECT(sigil_senml_encode(9, recs, 2, senml, sizeof senml, &len), SIGIL_ERR_BAD_ARGUMENT);

  sigil_freshness fr = {42, 0, 1700000000};
  sigil_freshness bad_lsb = {42, 33, -1};
  EXPECT(sigil_reading_sign(SIGIL_ALG_ED25519, ED_SECRET, 32, id, 16, SIGIL_FORMAT_COSE, &fr, senml, senml_len,
                            signed_, sizeof signed_, &len), SIGIL_OK);
  size_t signed_len = len;
  EXPECT(sigil_reading_sign(SIGIL_ALG_ED25519, ED_SECRET, 32, id, 16, SIGIL_FORMAT_COSE, &fr, senml, senml_len,
                            signed_, 10, &len), SIGIL_ERR_SHORT_BUFFER);
  TRUE(len == signed_len); /* the length needed */
  EXPECT(sigil_reading_sign(SIGIL_ALG_ED25519, NULL, 32, id, 16, SIGIL_FORMAT_COSE, &fr, senml, senml_len,
                            signed_, sizeof signed_, &len), SIGIL_ERR_NULL);
  EXPECT(sigil_reading_sign(SIGIL_ALG_ED25519, ED_SECRET, 16, id, 16, SIGIL_FORMAT_COSE, &fr, senml, senml_len,
                            signed_, sizeof signed_, &len), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_reading_sign(SIGIL_ALG_ED25519, ED_SECRET, 32, NULL, 16, SIGIL_FORMAT_COSE, &fr, senml, senml_len,
                            signed_, sizeof signed_, &len), SIGIL_ERR_NULL);
  EXPECT(sigil_reading_sign(SIGIL_ALG_ED25519, ED_SECRET, 32, id, 8, SIGIL_FORMAT_COSE, &fr, senml, senml_len,
                            signed_, sizeof signed_, &len), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_reading_sign(SIGIL_ALG_ED25519, ED_SECRET, 32, id, 16, SIGIL_FORMAT_COSE, NULL, senml, senml_len,
                            signed_, sizeof signed_, &len), SIGIL_ERR_NULL);
  EXPECT(sigil_reading_sign(SIGIL_ALG_ED25519, ED_SECRET, 32, id, 16, SIGIL_FORMAT_COSE, &bad_lsb, senml,
                            senml_len, signed_, sizeof signed_, &len), SIGIL_ERR_BAD_ARGUMENT);
  EXPECT(sigil_reading_sign(SIGIL_ALG_ED25519, ED_SECRET, 32, id, 16, SIGIL_FORMAT_COSE, &fr, NULL, senml_len,
                            signed_, sizeof signed_, &len), SIGIL_ERR_NULL);
  EXPECT(sigil_reading_sign(SIGIL_ALG_ED25519, ED_SECRET, 32, id, 16, SIGIL_FORMAT_COSE, &fr, senml, 0,
                            signed_, sizeof signed_, &len), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_reading_sign(SIGIL_ALG_ED25519, ED_SECRET, 32, id, 16, SIGIL_FORMAT_COSE, &fr, senml,
                            SIGIL_MAX_SENML + 1, signed_, sizeof signed_, &len), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_reading_sign(SIGIL_ALG_ED25519, ED_SECRET, 32, id, 16, SIGIL_FORMAT_COSE, &fr, senml, senml_len,
                            NULL, sizeof signed_, &len), SIGIL_ERR_NULL);
  EXPECT(sigil_reading_sign(SIGIL_ALG_ED25519, ED_SECRET, 32, id, 16, SIGIL_FORMAT_COSE, &fr, senml, senml_len,
                            signed_, sizeof signed_, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_reading_sign(SIGIL_ALG_ED25519, ED_SECRET, 32, id, 16, 0, &fr, senml, senml_len,
                            signed_, sizeof signed_, &len), SIGIL_ERR_BAD_ARGUMENT);
  EXPECT(sigil_reading_sign(SIGIL_ALG_ED25519, ED_SECRET, 32, id, 16, SIGIL_FORMAT_COSE, &fr, senml, senml_len,
                            signed_, sizeof signed_, &len), SIGIL_OK);

  sigil_reading_info info;
  EXPECT(sigil_reading_parse(SIGIL_FORMAT_COSE, signed_, signed_len, &info), SIGIL_OK);
  TRUE(info.alg == SIGIL_ALG_ED25519 && info.seq == 42 && info.lsb_bits == 0 && info.has_time &&
       info.unix_time == 1700000000 && memcmp(info.kid, id, 16) == 0);
  EXPECT(sigil_reading_parse(SIGIL_FORMAT_COSE, NULL, signed_len, &info), SIGIL_ERR_NULL);
  EXPECT(sigil_reading_parse(SIGIL_FORMAT_COSE, signed_, signed_len, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_reading_parse(SIGIL_FORMAT_COSE, signed_, 0, &info), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_reading_parse(SIGIL_FORMAT_COSE, signed_, SIGIL_MAX_READING + 1, &info), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_reading_parse(SIGIL_FORMAT_COSE, signed_, signed_len - 1, &info), SIGIL_ERR_MALFORMED);
  EXPECT(sigil_reading_parse(5, signed_, signed_len, &info), SIGIL_ERR_BAD_ARGUMENT);

  EXPECT(sigil_reading_verify(SIGIL_FORMAT_COSE, signed_, signed_len, &key, id, 16, 42), SIGIL_OK);
  EXPECT(sigil_reading_verify(SIGIL_FORMAT_COSE, signed_, signed_len, &key, id, 16, 43), SIGIL_ERR_SEQUENCE_MISMATCH);
  EXPECT(sigil_reading_verify(SIGIL_FORMAT_COSE, NULL, signed_len, &key, id, 16, 42), SIGIL_ERR_NULL);
  EXPECT(sigil_reading_verify(SIGIL_FORMAT_COSE, signed_, signed_len, NULL, id, 16, 42), SIGIL_ERR_NULL);
  EXPECT(sigil_reading_verify(SIGIL_FORMAT_COSE, signed_, signed_len, &key, NULL, 16, 42), SIGIL_ERR_NULL);
  EXPECT(sigil_reading_verify(SIGIL_FORMAT_COSE, signed_, signed_len, &key, id, 15, 42), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_reading_verify(SIGIL_FORMAT_COSE, signed_, 0, &key, id, 16, 42), SIGIL_ERR_BAD_LENGTH);
  uint8_t other_id[16] = {0};
  EXPECT(sigil_reading_verify(SIGIL_FORMAT_COSE, signed_, signed_len, &key, other_id, 16, 42),
         SIGIL_ERR_KID_MISMATCH);
  signed_[signed_len - 1] ^= 1; /* the signature's last byte */
  EXPECT(sigil_reading_verify(SIGIL_FORMAT_COSE, signed_, signed_len, &key, id, 16, 42), SIGIL_ERR_BAD_SIGNATURE);
}

static void device(void) {
  static sigil_device dev;
  struct fake f;
  memset(&f, 0, sizeof f);
  sigil_platform p = {fake_rng, fake_read, fake_write, &f};
  sigil_platform no_rng = {NULL, fake_read, fake_write, &f};
  sigil_device_config cfg, bad;
  uint8_t buf[SIGIL_MAX_DATAGRAM], id[16], id2[16], pub[SIGIL_MAX_PUBLIC_KEY];
  size_t len = 0, pub_len = 0;
  uint32_t alg = 0;
  uint64_t at = 0;
  sigil_event ev;
  sigil_device_info info;
  char loc[32];
  sigil_record rec = {"t", "Cel", 20.0};

  EXPECT(sigil_device_config_default(NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_device_config_default(&cfg), SIGIL_OK);

  /* Not booted: every call says so. */
  memset(&dev, 0, sizeof dev);
  EXPECT(sigil_device_identity(&dev, id, sizeof id), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_device_public_key(&dev, &alg, pub, sizeof pub, &pub_len), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_device_handle_timeout(&dev, 0), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_device_handle_datagram(&dev, 0, buf, 4), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_device_poll_transmit(&dev, buf, sizeof buf, &len), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_device_poll_timeout(&dev, &at), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_device_poll_event(&dev, &ev), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_device_publish(&dev, 0, &rec, 1, -1, NULL), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_device_get_info(&dev, &info), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_device_location(&dev, loc, sizeof loc), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_device_end(&dev), SIGIL_OK);
  EXPECT(sigil_device_end(NULL), SIGIL_ERR_NULL);

  /* Boot's arguments. */
  EXPECT(sigil_device_boot(NULL, sizeof dev, &cfg, &p, NULL, 0, NULL, 0), SIGIL_ERR_NULL);
  EXPECT(sigil_device_boot(&dev, sizeof dev - 1, &cfg, &p, NULL, 0, NULL, 0), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_device_boot(&dev, sizeof dev, NULL, &p, NULL, 0, NULL, 0), SIGIL_ERR_NULL);
  EXPECT(sigil_device_boot(&dev, sizeof dev, &cfg, NULL, NULL, 0, NULL, 0), SIGIL_ERR_NULL);
  EXPECT(sigil_device_boot(&dev, sizeof dev, &cfg, &no_rng, NULL, 0, NULL, 0), SIGIL_ERR_NULL);
  EXPECT(sigil_device_boot(&dev, sizeof dev, &cfg, &p, NULL, 1, NULL, 0), SIGIL_ERR_NULL);
  EXPECT(sigil_device_boot(&dev, sizeof dev, &cfg, &p, NULL, SIGIL_MAX_GROUP, NULL, 0), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_device_boot(&dev, sizeof dev, &cfg, &p, NULL, 0, NULL, 1), SIGIL_ERR_NULL);
  uint8_t big[SIGIL_MAX_OTHER_INFO + 1] = {0};
  EXPECT(sigil_device_boot(&dev, sizeof dev, &cfg, &p, NULL, 0, big, sizeof big), SIGIL_ERR_BAD_LENGTH);
  bad = cfg; bad.alg = 0;
  EXPECT(sigil_device_boot(&dev, sizeof dev, &bad, &p, NULL, 0, NULL, 0), SIGIL_ERR_BAD_ARGUMENT);
  bad = cfg; bad.format = 0;
  EXPECT(sigil_device_boot(&dev, sizeof dev, &bad, &p, NULL, 0, NULL, 0), SIGIL_ERR_BAD_ARGUMENT);
  bad = cfg; bad.lifetime_secs = 0;
  EXPECT(sigil_device_boot(&dev, sizeof dev, &bad, &p, NULL, 0, NULL, 0), SIGIL_ERR_CONFIG);
  bad = cfg; bad.lsb_bits = 33;
  EXPECT(sigil_device_boot(&dev, sizeof dev, &bad, &p, NULL, 0, NULL, 0), SIGIL_ERR_CONFIG);
  f.fail_rng = 1;
  EXPECT(sigil_device_boot(&dev, sizeof dev, &cfg, &p, NULL, 0, NULL, 0), SIGIL_ERR_RNG);
  f.fail_rng = 0; f.fail_storage = 1;
  EXPECT(sigil_device_boot(&dev, sizeof dev, &cfg, &p, NULL, 0, NULL, 0), SIGIL_ERR_STORAGE);
  f.fail_storage = 0;
  f.key_len = 5; /* a damaged key record */
  EXPECT(sigil_device_boot(&dev, sizeof dev, &cfg, &p, NULL, 0, NULL, 0), SIGIL_ERR_STORAGE);
  f.key_len = 0;

  /* First boot: a key is made and stored; its identity is I = h(P). */
  EXPECT(sigil_device_boot(&dev, sizeof dev, &cfg, &p, NULL, 0, NULL, 0), SIGIL_OK);
  TRUE(f.key_len == SIGIL_KEY_RECORD_LEN && f.seq_len == SIGIL_SEQUENCE_RECORD_LEN);
  EXPECT(sigil_device_identity(&dev, id, sizeof id), SIGIL_OK);
  EXPECT(sigil_device_identity(&dev, id, 15), SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_device_identity(&dev, NULL, 16), SIGIL_ERR_NULL);
  EXPECT(sigil_device_identity(NULL, id, 16), SIGIL_ERR_NULL);
  EXPECT(sigil_device_public_key(&dev, &alg, pub, sizeof pub, &pub_len), SIGIL_OK);
  TRUE(alg == SIGIL_ALG_ED25519 && pub_len == 32);
  EXPECT(sigil_device_public_key(&dev, &alg, pub, 31, &pub_len), SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_device_public_key(&dev, NULL, pub, sizeof pub, &pub_len), SIGIL_ERR_NULL);
  EXPECT(sigil_device_public_key(&dev, &alg, NULL, sizeof pub, &pub_len), SIGIL_ERR_NULL);
  EXPECT(sigil_device_public_key(&dev, &alg, pub, sizeof pub, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_device_public_key(NULL, &alg, pub, sizeof pub, &pub_len), SIGIL_ERR_NULL);
  sigil_key key = {alg, pub, pub_len};
  EXPECT(sigil_identity_of_key(&key, NULL, 0, id2, sizeof id2), SIGIL_OK);
  TRUE(memcmp(id, id2, 16) == 0);

  /* Registration: due at once. */
  EXPECT(sigil_device_poll_timeout(&dev, &at), SIGIL_OK);
  TRUE(at == 0);
  EXPECT(sigil_device_poll_timeout(&dev, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_device_poll_timeout(NULL, &at), SIGIL_ERR_NULL);
  EXPECT(sigil_device_handle_timeout(NULL, 0), SIGIL_ERR_NULL);
  EXPECT(sigil_device_handle_timeout(&dev, 0), SIGIL_OK);
  EXPECT(sigil_device_poll_transmit(&dev, buf, SIGIL_MAX_DATAGRAM - 1, &len), SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_device_poll_transmit(&dev, NULL, sizeof buf, &len), SIGIL_ERR_NULL);
  EXPECT(sigil_device_poll_transmit(&dev, buf, sizeof buf, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_device_poll_transmit(NULL, buf, sizeof buf, &len), SIGIL_ERR_NULL);
  EXPECT(sigil_device_poll_transmit(&dev, buf, sizeof buf, &len), SIGIL_OK);
  TRUE(len > 4 && (buf[0] >> 6) == 1 && buf[1] == 0x02); /* CoAP v1, POST */
  EXPECT(sigil_device_poll_transmit(&dev, buf, sizeof buf, &len), SIGIL_OK);
  TRUE(len == 0);

  /* Not registered yet. */
  EXPECT(sigil_device_publish(&dev, 1, &rec, 1, -1, NULL), SIGIL_ERR_NOT_REGISTERED);
  EXPECT(sigil_device_publish(&dev, 1, NULL, 1, -1, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_device_publish(&dev, 1, &rec, 0, -1, NULL), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_device_publish(&dev, 1, &rec, SIGIL_MAX_RECORDS + 1, -1, NULL), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_device_publish(NULL, 1, &rec, 1, -1, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_device_location(&dev, loc, sizeof loc), SIGIL_ERR_NOT_REGISTERED);
  EXPECT(sigil_device_location(&dev, NULL, sizeof loc), SIGIL_ERR_NULL);
  EXPECT(sigil_device_location(NULL, loc, sizeof loc), SIGIL_ERR_NULL);
  EXPECT(sigil_device_get_info(&dev, &info), SIGIL_OK);
  TRUE(!info.registered && !info.can_publish);
  EXPECT(sigil_device_get_info(&dev, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_device_get_info(NULL, &info), SIGIL_ERR_NULL);

  /* Garbage from the network is counted, not an error. */
  EXPECT(sigil_device_handle_datagram(&dev, 1, (const uint8_t *)"\xff\x00", 2), SIGIL_OK);
  EXPECT(sigil_device_handle_datagram(&dev, 1, buf, 0), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_device_handle_datagram(&dev, 1, NULL, 4), SIGIL_ERR_NULL);
  EXPECT(sigil_device_handle_datagram(NULL, 1, buf, 4), SIGIL_ERR_NULL);
  EXPECT(sigil_device_get_info(&dev, &info), SIGIL_OK);
  TRUE(info.malformed == 1);
  EXPECT(sigil_device_poll_event(&dev, &ev), SIGIL_OK);
  TRUE(ev.kind == SIGIL_EVENT_NONE);
  EXPECT(sigil_device_poll_event(&dev, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_device_poll_event(NULL, &ev), SIGIL_ERR_NULL);

  /* Ended: the state is no longer booted; a reboot from the same storage is the same device. */
  EXPECT(sigil_device_end(&dev), SIGIL_OK);
  EXPECT(sigil_device_identity(&dev, id2, sizeof id2), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_device_boot(&dev, sizeof dev, &cfg, &p, NULL, 0, NULL, 0), SIGIL_OK);
  EXPECT(sigil_device_identity(&dev, id2, sizeof id2), SIGIL_OK);
  TRUE(memcmp(id, id2, 16) == 0);
  EXPECT(sigil_device_end(&dev), SIGIL_OK);
}

int main(void) {
  identities();
  readings();
  device();
  return REPORT();
}
