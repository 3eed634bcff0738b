/* The CryptoDiet calls of sigil.h: every export given NULL pointers, short buffers and bad
 * lengths; the six operations and a node against known answers from pyca/cryptography
 * (vectors/diet-kat.json, turned into diet_kat.h by tests/c_api.rs); and three nodes in memory
 * through the three phases, with a replayed message, a tampered one and an unknown node's
 * hello refused. Run by tests/c_api.rs under AddressSanitizer and UndefinedBehaviorSanitizer. */
#include "sigil.h"
#include "check.h"
#include "diet_kat.h"

#include <stdio.h>
#include <string.h>


#define SAME(buf, kat) TRUE(sizeof(kat) == sizeof(buf) && memcmp((buf), (kat), sizeof(kat)) == 0)

/* A deterministic generator (a test, not a device); each context its own stream. */
struct fake {
  uint8_t counter;
  int fail;
};

static int32_t fake_rng(void *ctx, uint8_t *buf, size_t len) {
  struct fake *f = ctx;
  if (f->fail) return -1;
  for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)(f->counter++ * 53u + 7u);
  return 0;
}

static void key_pairs(void) {
  struct fake f = {1, 0};
  sigil_platform p = {fake_rng, NULL, NULL, &f};
  sigil_platform no_rng = {NULL, NULL, NULL, &f};
  uint8_t sk[SIGIL_DIET_SECRET_KEY_LEN], pk[SIGIL_DIET_PUBLIC_KEY_LEN], pk2[SIGIL_DIET_PUBLIC_KEY_LEN];

  /* ECC_GenKeyPair's arithmetic: the public key of a fixed scalar is pyca's. */
  EXPECT(sigil_diet_public_key(KAT_KEY_PAIR_SECRET, 32, pk, sizeof pk), SIGIL_OK);
  SAME(pk, KAT_KEY_PAIR_PUBLIC);
  EXPECT(sigil_diet_public_key(NULL, 32, pk, sizeof pk), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_public_key(KAT_KEY_PAIR_SECRET, 31, pk, sizeof pk), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_public_key(KAT_KEY_PAIR_SECRET, 33, pk, sizeof pk), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_public_key(KAT_KEY_PAIR_SECRET, 32, NULL, sizeof pk), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_public_key(KAT_KEY_PAIR_SECRET, 32, pk, 64), SIGIL_ERR_SHORT_BUFFER);
  static const uint8_t zero[32];
  EXPECT(sigil_diet_public_key(zero, 32, pk, sizeof pk), SIGIL_ERR_INVALID_KEY);

  /* Generation: randomness from the callback only; the pair matches. */
  EXPECT(sigil_diet_gen_key_pair(&p, sk, sizeof sk, pk, sizeof pk), SIGIL_OK);
  EXPECT(sigil_diet_public_key(sk, sizeof sk, pk2, sizeof pk2), SIGIL_OK);
  TRUE(memcmp(pk, pk2, sizeof pk) == 0 && pk[0] == 0x04);
  uint8_t sk2[32];
  EXPECT(sigil_diet_gen_key_pair(&p, sk2, sizeof sk2, pk2, sizeof pk2), SIGIL_OK);
  TRUE(memcmp(sk, sk2, 32) != 0);
  f.fail = 1;
  EXPECT(sigil_diet_gen_key_pair(&p, sk, sizeof sk, pk, sizeof pk), SIGIL_ERR_RNG);
  f.fail = 0;
  EXPECT(sigil_diet_gen_key_pair(NULL, sk, sizeof sk, pk, sizeof pk), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_gen_key_pair(&no_rng, sk, sizeof sk, pk, sizeof pk), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_gen_key_pair(&p, NULL, sizeof sk, pk, sizeof pk), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_gen_key_pair(&p, sk, 31, pk, sizeof pk), SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_diet_gen_key_pair(&p, sk, sizeof sk, NULL, sizeof pk), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_gen_key_pair(&p, sk, sizeof sk, pk, 64), SIGIL_ERR_SHORT_BUFFER);
}

static void shared_keys(void) {
  uint8_t okm[42], okm2[42];
  /* ECDH_GenSharedKey: both sides derive pyca's HKDF output. */
  EXPECT(sigil_diet_shared_key(KAT_ECDH_HKDF_SECRET, 32, KAT_ECDH_HKDF_PEER_PUBLIC, 65,
                               KAT_ECDH_HKDF_SALT, sizeof KAT_ECDH_HKDF_SALT, KAT_ECDH_HKDF_INFO,
                               sizeof KAT_ECDH_HKDF_INFO, okm, sizeof okm),
         SIGIL_OK);
  SAME(okm, KAT_ECDH_HKDF_OKM_42);
  EXPECT(sigil_diet_shared_key(KAT_ECDH_HKDF_PEER_SECRET, 32, KAT_ECDH_HKDF_PUBLIC, 65,
                               KAT_ECDH_HKDF_SALT, sizeof KAT_ECDH_HKDF_SALT, KAT_ECDH_HKDF_INFO,
                               sizeof KAT_ECDH_HKDF_INFO, okm2, sizeof okm2),
         SIGIL_OK);
  SAME(okm2, KAT_ECDH_HKDF_OKM_42);
  /* Other salt, other key; no salt and no info is allowed. */
  EXPECT(sigil_diet_shared_key(KAT_ECDH_HKDF_SECRET, 32, KAT_ECDH_HKDF_PEER_PUBLIC, 65, NULL, 0,
                               NULL, 0, okm, sizeof okm),
         SIGIL_OK);
  TRUE(memcmp(okm, KAT_ECDH_HKDF_OKM_42, 42) != 0);

  /* A point off the curve, a compressed point. */
  uint8_t bad[65];
  memcpy(bad, KAT_ECDH_HKDF_PEER_PUBLIC, 65);
  bad[64] ^= 1;
  EXPECT(sigil_diet_shared_key(KAT_ECDH_HKDF_SECRET, 32, bad, 65, NULL, 0, NULL, 0, okm, 16),
         SIGIL_ERR_INVALID_KEY);
  bad[64] ^= 1;
  bad[0] = 0x02;
  EXPECT(sigil_diet_shared_key(KAT_ECDH_HKDF_SECRET, 32, bad, 65, NULL, 0, NULL, 0, okm, 16),
         SIGIL_ERR_INVALID_KEY);
  EXPECT(sigil_diet_shared_key(KAT_ECDH_HKDF_SECRET, 32, bad, 33, NULL, 0, NULL, 0, okm, 16),
         SIGIL_ERR_BAD_LENGTH);

  const uint8_t *sk = KAT_ECDH_HKDF_SECRET, *pk = KAT_ECDH_HKDF_PEER_PUBLIC;
  EXPECT(sigil_diet_shared_key(NULL, 32, pk, 65, NULL, 0, NULL, 0, okm, 16), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_shared_key(sk, 16, pk, 65, NULL, 0, NULL, 0, okm, 16), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_shared_key(sk, 32, NULL, 65, NULL, 0, NULL, 0, okm, 16), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_shared_key(sk, 32, pk, 64, NULL, 0, NULL, 0, okm, 16), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_shared_key(sk, 32, pk, 65, NULL, 4, NULL, 0, okm, 16), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_shared_key(sk, 32, pk, 65, NULL, 0, NULL, 4, okm, 16), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_shared_key(sk, 32, pk, 65, NULL, 0, NULL, 0, NULL, 16), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_shared_key(sk, 32, pk, 65, NULL, 0, NULL, 0, okm, 0), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_shared_key(sk, 32, pk, 65, NULL, 0, NULL, 0, okm, SIGIL_DIET_MAX_DERIVED + 1),
         SIGIL_ERR_BAD_LENGTH);
  /* The longest derivation HKDF allows. */
  static uint8_t longest[SIGIL_DIET_MAX_DERIVED];
  EXPECT(sigil_diet_shared_key(sk, 32, pk, 65, NULL, 0, NULL, 0, longest, sizeof longest), SIGIL_OK);
}

static void aes_ccm(void) {
  const uint8_t *key = KAT_AES_CCM8_KEY, *nonce = KAT_AES_CCM8_NONCE, *aad = KAT_AES_CCM8_AAD;
  const size_t aad_len = sizeof KAT_AES_CCM8_AAD, plain_len = sizeof KAT_AES_CCM8_PLAINTEXT;
  uint8_t sealed[sizeof KAT_AES_CCM8_CIPHERTEXT_AND_TAG];
  uint8_t opened[sizeof KAT_AES_CCM8_PLAINTEXT];
  size_t n = 0;

  /* AES_Encrypt and AES_Decrypt: pyca's ciphertext and tag, and back. */
  EXPECT(sigil_diet_encrypt(key, 16, nonce, 12, aad, aad_len, KAT_AES_CCM8_PLAINTEXT, plain_len,
                            sealed, sizeof sealed, &n),
         SIGIL_OK);
  TRUE(n == sizeof sealed);
  SAME(sealed, KAT_AES_CCM8_CIPHERTEXT_AND_TAG);
  n = 0;
  EXPECT(sigil_diet_decrypt(key, 16, nonce, 12, aad, aad_len, sealed, sizeof sealed, opened,
                            sizeof opened, &n),
         SIGIL_OK);
  TRUE(n == plain_len);
  SAME(opened, KAT_AES_CCM8_PLAINTEXT);

  /* In place, both ways. */
  uint8_t buf[sizeof sealed];
  memcpy(buf, KAT_AES_CCM8_PLAINTEXT, plain_len);
  EXPECT(sigil_diet_encrypt(key, 16, nonce, 12, aad, aad_len, buf, plain_len, buf, sizeof buf, &n),
         SIGIL_OK);
  SAME(buf, KAT_AES_CCM8_CIPHERTEXT_AND_TAG);
  EXPECT(sigil_diet_decrypt(key, 16, nonce, 12, aad, aad_len, buf, sizeof buf, buf, sizeof buf, &n),
         SIGIL_OK);
  TRUE(n == plain_len && memcmp(buf, KAT_AES_CCM8_PLAINTEXT, plain_len) == 0);

  /* Altered ciphertext, tag, AAD or nonce: refused, and no plaintext comes out. */
  for (int what = 0; what < 4; what++) {
    uint8_t c[sizeof sealed], a[sizeof KAT_AES_CCM8_AAD], nn[12];
    memcpy(c, sealed, sizeof c);
    memcpy(a, aad, sizeof a);
    memcpy(nn, nonce, sizeof nn);
    if (what == 0) c[3] ^= 1;
    if (what == 1) c[sizeof c - 1] ^= 1;
    if (what == 2) a[1] ^= 1;
    if (what == 3) nn[11] ^= 1;
    memset(opened, 0xAA, sizeof opened);
    EXPECT(sigil_diet_decrypt(key, 16, nn, 12, a, sizeof a, c, sizeof c, opened, sizeof opened, &n),
           SIGIL_ERR_BAD_SIGNATURE);
    uint8_t zeros[sizeof opened] = {0};
    TRUE(memcmp(opened, zeros, sizeof opened) == 0);
  }

  /* An empty message still carries a tag. */
  uint8_t tag_only[SIGIL_DIET_TAG_LEN];
  EXPECT(sigil_diet_encrypt(key, 16, nonce, 12, NULL, 0, NULL, 0, tag_only, sizeof tag_only, &n),
         SIGIL_OK);
  TRUE(n == SIGIL_DIET_TAG_LEN);
  EXPECT(sigil_diet_decrypt(key, 16, nonce, 12, NULL, 0, tag_only, sizeof tag_only, NULL, 0, &n),
         SIGIL_ERR_NULL);
  EXPECT(sigil_diet_decrypt(key, 16, nonce, 12, NULL, 0, tag_only, sizeof tag_only, opened, 0, &n),
         SIGIL_OK);
  TRUE(n == 0);

  /* Bad arguments. */
  const uint8_t *pl = KAT_AES_CCM8_PLAINTEXT;
  EXPECT(sigil_diet_encrypt(NULL, 16, nonce, 12, aad, aad_len, pl, plain_len, buf, sizeof buf, &n), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_encrypt(key, 32, nonce, 12, aad, aad_len, pl, plain_len, buf, sizeof buf, &n), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_encrypt(key, 16, NULL, 12, aad, aad_len, pl, plain_len, buf, sizeof buf, &n), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_encrypt(key, 16, nonce, 13, aad, aad_len, pl, plain_len, buf, sizeof buf, &n), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_encrypt(key, 16, nonce, 12, NULL, 5, pl, plain_len, buf, sizeof buf, &n), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_encrypt(key, 16, nonce, 12, aad, aad_len, NULL, plain_len, buf, sizeof buf, &n), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_encrypt(key, 16, nonce, 12, aad, aad_len, pl, plain_len, NULL, sizeof buf, &n), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_encrypt(key, 16, nonce, 12, aad, aad_len, pl, plain_len, buf, plain_len + 7, &n), SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_diet_encrypt(key, 16, nonce, 12, aad, aad_len, pl, plain_len, buf, sizeof buf, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_encrypt(key, 16, nonce, 12, aad, aad_len, pl, SIZE_MAX - 4, buf, sizeof buf, &n), SIGIL_ERR_BAD_LENGTH);
  const uint8_t *s = sealed;
  EXPECT(sigil_diet_decrypt(NULL, 16, nonce, 12, aad, aad_len, s, sizeof sealed, opened, sizeof opened, &n), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_decrypt(key, 15, nonce, 12, aad, aad_len, s, sizeof sealed, opened, sizeof opened, &n), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_decrypt(key, 16, NULL, 12, aad, aad_len, s, sizeof sealed, opened, sizeof opened, &n), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_decrypt(key, 16, nonce, 11, aad, aad_len, s, sizeof sealed, opened, sizeof opened, &n), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_decrypt(key, 16, nonce, 12, NULL, 5, s, sizeof sealed, opened, sizeof opened, &n), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_decrypt(key, 16, nonce, 12, aad, aad_len, NULL, sizeof sealed, opened, sizeof opened, &n), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_decrypt(key, 16, nonce, 12, aad, aad_len, s, 7, opened, sizeof opened, &n), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_decrypt(key, 16, nonce, 12, aad, aad_len, s, sizeof sealed, NULL, sizeof opened, &n), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_decrypt(key, 16, nonce, 12, aad, aad_len, s, sizeof sealed, opened, sizeof opened - 1, &n), SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_diet_decrypt(key, 16, nonce, 12, aad, aad_len, s, sizeof sealed, opened, sizeof opened, NULL), SIGIL_ERR_NULL);
}

static void signatures(void) {
  const uint8_t *sk = KAT_ECDSA_SECRET, *pk = KAT_ECDSA_PUBLIC, *msg = KAT_ECDSA_MESSAGE;
  const size_t len = sizeof KAT_ECDSA_MESSAGE;
  uint8_t sig[SIGIL_DIET_SIGNATURE_LEN];

  /* ECDSA_sign: RFC 6979, so pyca's deterministic signature exactly. */
  EXPECT(sigil_diet_sign(sk, 32, msg, len, sig, sizeof sig), SIGIL_OK);
  SAME(sig, KAT_ECDSA_RFC6979_SIGNATURE);
  EXPECT(sigil_diet_verify(pk, 65, msg, len, sig, sizeof sig), SIGIL_OK);
  /* ECDSA_verify: pyca's randomized signature verifies; altered ones do not. */
  EXPECT(sigil_diet_verify(pk, 65, msg, len, KAT_ECDSA_RANDOM_SIGNATURE, 64), SIGIL_OK);
  uint8_t bad[64];
  memcpy(bad, KAT_ECDSA_RANDOM_SIGNATURE, 64);
  bad[10] ^= 1;
  EXPECT(sigil_diet_verify(pk, 65, msg, len, bad, 64), SIGIL_ERR_BAD_SIGNATURE);
  EXPECT(sigil_diet_verify(pk, 65, msg, len - 1, KAT_ECDSA_RANDOM_SIGNATURE, 64), SIGIL_ERR_BAD_SIGNATURE);
  EXPECT(sigil_diet_verify(KAT_ECDH_HKDF_PUBLIC, 65, msg, len, KAT_ECDSA_RANDOM_SIGNATURE, 64),
         SIGIL_ERR_BAD_SIGNATURE);
  uint8_t notkey[65];
  memcpy(notkey, pk, 65);
  notkey[0] = 0x05;
  EXPECT(sigil_diet_verify(notkey, 65, msg, len, sig, 64), SIGIL_ERR_INVALID_KEY);
  /* The empty message is a message. */
  EXPECT(sigil_diet_sign(sk, 32, NULL, 0, sig, sizeof sig), SIGIL_OK);
  EXPECT(sigil_diet_verify(pk, 65, NULL, 0, sig, sizeof sig), SIGIL_OK);

  EXPECT(sigil_diet_sign(NULL, 32, msg, len, sig, sizeof sig), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_sign(sk, 0, msg, len, sig, sizeof sig), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_sign(sk, 32, NULL, len, sig, sizeof sig), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_sign(sk, 32, msg, len, NULL, sizeof sig), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_sign(sk, 32, msg, len, sig, 63), SIGIL_ERR_SHORT_BUFFER);
  static const uint8_t zero[32];
  EXPECT(sigil_diet_sign(zero, 32, msg, len, sig, sizeof sig), SIGIL_ERR_INVALID_KEY);
  EXPECT(sigil_diet_verify(NULL, 65, msg, len, sig, 64), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_verify(pk, 33, msg, len, sig, 64), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_verify(pk, 65, NULL, len, sig, 64), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_verify(pk, 65, msg, len, NULL, 64), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_verify(pk, 65, msg, len, sig, 70), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_verify(pk, 65, msg, len, sig, 63), SIGIL_ERR_BAD_LENGTH);
}

/* A node talking to hellos and messages pyca built (the same as crates/sigil-diet/tests/kat.rs
 * checks in Rust). */
static void node_against_pyca(void) {
  static sigil_diet_node node;
  sigil_diet_received r;
  uint8_t plain[64], out[256];
  size_t len = 0;
  uint32_t py = 99, to = 99;

  EXPECT(sigil_diet_node_init(&node, sizeof node, KAT_NODE_RUST_ECDH, 32, KAT_NODE_RUST_SIGNING, 32,
                              KAT_NODE_RUST_EPOCH, NULL),
         SIGIL_OK);
  /* The Python node's signing key is the key pair vector's. */
  EXPECT(sigil_diet_node_add_neighbour(&node, 0, KAT_KEY_PAIR_PUBLIC, 65, &py), SIGIL_OK);
  TRUE(py == 0);
  /* Our own hello goes out first (to the Python node), byte for byte pyca's. */
  EXPECT(sigil_diet_node_poll_transmit(&node, 0, out, sizeof out, &len, &to), SIGIL_OK);
  TRUE(len == SIGIL_DIET_HELLO_LEN && to == py && out[0] == 0x01 && out[1] == 0x00);
  TRUE(len == sizeof KAT_NODE_RUST_HELLO && memcmp(out, KAT_NODE_RUST_HELLO, len) == 0);
  /* Theirs does not echo our nonce: it is answered with a challenge (pyca's), no keys yet. */
  EXPECT(sigil_diet_node_handle(&node, 0, py, KAT_NODE_PYTHON_HELLO, sizeof KAT_NODE_PYTHON_HELLO,
                                plain, sizeof plain, &r),
         SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_CHALLENGED && !r.new_keys);
  EXPECT(sigil_diet_node_poll_transmit(&node, 0, out, sizeof out, &len, &to), SIGIL_OK);
  TRUE(len == sizeof KAT_NODE_RUST_CHALLENGE && to == py);
  TRUE(memcmp(out, KAT_NODE_RUST_CHALLENGE, sizeof KAT_NODE_RUST_CHALLENGE) == 0);
  /* The same hello again, within the hello interval: refused before its signature is checked. */
  EXPECT(sigil_diet_node_handle(&node, 10, py, KAT_NODE_PYTHON_HELLO, sizeof KAT_NODE_PYTHON_HELLO,
                                plain, sizeof plain, &r),
         SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_REFUSED && r.refusal == SIGIL_DIET_REFUSED_BUDGET);
  /* Their acknowledgement echoes our nonce: keys, and no answer (it carries ACK). */
  EXPECT(sigil_diet_node_handle(&node, 20, py, KAT_NODE_PYTHON_ANSWER, sizeof KAT_NODE_PYTHON_ANSWER,
                                plain, sizeof plain, &r),
         SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_HELLO && r.new_keys);
  EXPECT(sigil_diet_node_poll_transmit(&node, 20, out, sizeof out, &len, &to), SIGIL_OK);
  TRUE(len == 0);
  sigil_diet_counters kc;
  EXPECT(sigil_diet_node_counters(&node, &kc), SIGIL_OK);
  TRUE(kc.challenged == 1 && kc.over_budget == 1 && kc.hellos_accepted == 1 && kc.refused == 1);
  /* Their first hello replayed now changes nothing (the keys are held). */
  EXPECT(sigil_diet_node_handle(&node, 30, py, KAT_NODE_PYTHON_HELLO, sizeof KAT_NODE_PYTHON_HELLO,
                                plain, sizeof plain, &r),
         SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_HELLO && !r.new_keys);
  EXPECT(sigil_diet_node_poll_transmit(&node, 30, out, sizeof out, &len, &to), SIGIL_OK);
  TRUE(len == SIGIL_DIET_HELLO_LEN && out[1] == 0x01);

  EXPECT(sigil_diet_node_handle(&node, 0, py, KAT_NODE_PYTHON_DATA_SEQ0, sizeof KAT_NODE_PYTHON_DATA_SEQ0,
                                plain, sizeof plain, &r),
         SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_MESSAGE && r.len == 11 && memcmp(plain, "from python", 11) == 0);
  EXPECT(sigil_diet_node_handle(&node, 0, py, KAT_NODE_PYTHON_DATA_SEQ5, sizeof KAT_NODE_PYTHON_DATA_SEQ5,
                                plain, sizeof plain, &r),
         SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_MESSAGE && r.len == 5 && memcmp(plain, "seq 5", 5) == 0);
  /* Our first message is pyca's. */
  EXPECT(sigil_diet_node_send(&node, py, KAT_NODE_RUST_DATA_PLAINTEXT, sizeof KAT_NODE_RUST_DATA_PLAINTEXT,
                              out, sizeof out, &len),
         SIGIL_OK);
  TRUE(len == sizeof KAT_NODE_RUST_DATA_SEQ0);
  TRUE(memcmp(out, KAT_NODE_RUST_DATA_SEQ0, sizeof KAT_NODE_RUST_DATA_SEQ0) == 0);
  EXPECT(sigil_diet_node_end(&node), SIGIL_OK);

  /* The Python node's keys in a node of ours: its first hello is pyca's too. */
  EXPECT(sigil_diet_node_init(&node, sizeof node, KAT_NODE_PYTHON_ECDH, 32, KAT_NODE_PYTHON_SIGNING, 32,
                              KAT_NODE_PYTHON_EPOCH, NULL),
         SIGIL_OK);
  uint8_t rust_sig[65];
  EXPECT(sigil_diet_public_key(KAT_NODE_RUST_SIGNING, 32, rust_sig, sizeof rust_sig), SIGIL_OK);
  EXPECT(sigil_diet_node_add_neighbour(&node, 0, rust_sig, 65, &py), SIGIL_OK);
  EXPECT(sigil_diet_node_poll_transmit(&node, 0, out, sizeof out, &len, &to), SIGIL_OK);
  TRUE(len == sizeof KAT_NODE_PYTHON_HELLO && memcmp(out, KAT_NODE_PYTHON_HELLO, len) == 0);
  EXPECT(sigil_diet_node_end(&node), SIGIL_OK);
}

/* ---- three nodes in memory */

struct net_node {
  sigil_diet_node node;
  uint8_t id[SIGIL_IDENTITY_LEN];
  uint32_t handle_of[4]; /* handle for each other node's index, or UNKNOWN */
};

static struct net_node nodes[3];
static sigil_diet_counters counters_of(int i) {
  sigil_diet_counters c;
  memset(&c, 0, sizeof c);
  EXPECT(sigil_diet_node_counters(&nodes[i].node, &c), SIGIL_OK);
  return c;
}

static int index_of_handle(int at, uint32_t h) {
  for (int j = 0; j < 3; j++)
    if (j != at && nodes[at].handle_of[j] == h) return j;
  return -1;
}

/* Delivers every datagram due at `now` until the network is quiet; returns how many went. */
static int run_network(uint64_t now) {
  int delivered = 0, moved = 1;
  uint8_t buf[SIGIL_DIET_HELLO_LEN], plain[64];
  while (moved) {
    moved = 0;
    for (int i = 0; i < 3; i++) {
      size_t len = 1;
      uint32_t to = 0;
      while (1) {
        EXPECT(sigil_diet_node_poll_transmit(&nodes[i].node, now, buf, sizeof buf, &len, &to), SIGIL_OK);
        if (len == 0) break;
        int j = index_of_handle(i, to);
        TRUE(j >= 0);
        if (j < 0) break;
        sigil_diet_received r;
        EXPECT(sigil_diet_node_handle(&nodes[j].node, now, nodes[j].handle_of[i], buf, len, plain, sizeof plain, &r),
               SIGIL_OK);
        TRUE(r.outcome == SIGIL_DIET_HELLO || r.outcome == SIGIL_DIET_CHALLENGED);
        delivered++;
        moved = 1;
      }
    }
  }
  return delivered;
}

static void three_nodes(void) {
  struct fake f = {9, 0};
  sigil_platform p = {fake_rng, NULL, NULL, &f};
  uint8_t ecdh[3][32], sign[3][32], pub[65];
  sigil_diet_config cfg;
  EXPECT(sigil_diet_config_default(&cfg), SIGIL_OK);
  TRUE(cfg.hello_initial_ms == 1000 && cfg.hello_max_ms == 32000 && cfg.hello_attempts == 8);
  cfg.hello_initial_ms = 100;

  for (int i = 0; i < 3; i++) {
    EXPECT(sigil_diet_gen_key_pair(&p, ecdh[i], 32, pub, sizeof pub), SIGIL_OK);
    EXPECT(sigil_diet_gen_key_pair(&p, sign[i], 32, pub, sizeof pub), SIGIL_OK);
    EXPECT(sigil_diet_node_init(&nodes[i].node, sizeof nodes[i].node, ecdh[i], 32, sign[i], 32, 1, &cfg),
           SIGIL_OK);
    EXPECT(sigil_diet_node_identity(&nodes[i].node, nodes[i].id, sizeof nodes[i].id), SIGIL_OK);
    /* The identity is I = h(P) of the signing key. */
    uint8_t id[16];
    sigil_key key = {SIGIL_ALG_ECDSA_P256, pub, sizeof pub};
    EXPECT(sigil_identity_of_key(&key, NULL, 0, id, sizeof id), SIGIL_OK);
    TRUE(memcmp(id, nodes[i].id, 16) == 0);
  }
  /* Each lists the other two by identity. */
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 4; j++) nodes[i].handle_of[j] = SIGIL_DIET_UNKNOWN_NEIGHBOUR;
    for (int j = 0; j < 3; j++) {
      if (j == i) continue;
      EXPECT(sigil_diet_node_add_neighbour(&nodes[i].node, 0, nodes[j].id, 16, &nodes[i].handle_of[j]),
             SIGIL_OK);
      sigil_diet_phase ph = 0;
      EXPECT(sigil_diet_node_phase(&nodes[i].node, nodes[i].handle_of[j], &ph), SIGIL_OK);
      TRUE(ph == SIGIL_DIET_HANDSHAKE);
    }
    uint64_t at = 1;
    EXPECT(sigil_diet_node_poll_timeout(&nodes[i].node, &at), SIGIL_OK);
    TRUE(at == 0);
  }

  /* Phases 1 and 2: hellos both ways, keys derived; nothing is left to send. Per pair: a
   * hello, the answer that challenges it (echoing its nonce) and the acknowledgement that
   * echoes the challenge's (flagged ACK: it needs no answer). */
  TRUE(run_network(0) == 9);
  uint64_t sent = 0, challenged = 0;
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 3; j++) {
      if (j == i) continue;
      sigil_diet_phase ph = 0;
      EXPECT(sigil_diet_node_phase(&nodes[i].node, nodes[i].handle_of[j], &ph), SIGIL_OK);
      TRUE(ph == SIGIL_DIET_ESTABLISHED);
    }
    uint64_t at = 0;
    EXPECT(sigil_diet_node_poll_timeout(&nodes[i].node, &at), SIGIL_OK);
    TRUE(at == SIGIL_NEVER);
    sigil_diet_counters c = counters_of(i);
    TRUE(c.hellos_accepted == 2 && c.refused == 0 && c.challenges_sent == 0 && c.moved == 0);
    sent += c.hellos_sent;
    challenged += c.challenged;
  }
  TRUE(sent == 9 && challenged == 3);
  TRUE(run_network(5000) == 0);

  /* Phase 3: every pair, both ways. */
  uint8_t dgram[128], plain[64];
  size_t len = 0;
  sigil_diet_received r;
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 3; j++) {
      if (j == i) continue;
      char text[32];
      int n = snprintf(text, sizeof text, "from %d to %d", i, j);
      EXPECT(sigil_diet_node_send(&nodes[i].node, nodes[i].handle_of[j], (const uint8_t *)text, (size_t)n,
                                  dgram, sizeof dgram, &len),
             SIGIL_OK);
      TRUE(len == (size_t)n + SIGIL_DIET_OVERHEAD);
      memset(plain, 0, sizeof plain);
      EXPECT(sigil_diet_node_handle(&nodes[j].node, 0, nodes[j].handle_of[i], dgram, len, plain, sizeof plain, &r),
             SIGIL_OK);
      TRUE(r.outcome == SIGIL_DIET_MESSAGE && r.len == (size_t)n && memcmp(plain, text, (size_t)n) == 0);
    }
  }
  for (int i = 0; i < 3; i++) {
    sigil_diet_counters c = counters_of(i);
    TRUE(c.messages_sent == 2 && c.messages_accepted == 2 && c.refused == 0);
  }

  /* A replay: node 0's next message to node 1, delivered twice. */
  EXPECT(sigil_diet_node_send(&nodes[0].node, nodes[0].handle_of[1], (const uint8_t *)"once", 4, dgram,
                              sizeof dgram, &len),
         SIGIL_OK);
  EXPECT(sigil_diet_node_handle(&nodes[1].node, 0, nodes[1].handle_of[0], dgram, len, plain, sizeof plain, &r),
         SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_MESSAGE && r.len == 4);
  EXPECT(sigil_diet_node_handle(&nodes[1].node, 0, nodes[1].handle_of[0], dgram, len, plain, sizeof plain, &r),
         SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_REFUSED && r.refusal == SIGIL_DIET_REFUSED_REPLAY);
  /* The same message from another neighbour's address: not its keys. */
  EXPECT(sigil_diet_node_handle(&nodes[1].node, 0, nodes[1].handle_of[2], dgram, len, plain, sizeof plain, &r),
         SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_REFUSED && r.refusal == SIGIL_DIET_REFUSED_BAD_TAG);

  /* Tampering: a ciphertext byte, then a signature byte. */
  EXPECT(sigil_diet_node_send(&nodes[0].node, nodes[0].handle_of[1], (const uint8_t *)"altered", 7, dgram,
                              sizeof dgram, &len),
         SIGIL_OK);
  dgram[6] ^= 0x40;
  EXPECT(sigil_diet_node_handle(&nodes[1].node, 0, nodes[1].handle_of[0], dgram, len, plain, sizeof plain, &r),
         SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_REFUSED && r.refusal == SIGIL_DIET_REFUSED_BAD_TAG);
  dgram[6] ^= 0x40;
  dgram[len - 3] ^= 0x01;
  EXPECT(sigil_diet_node_handle(&nodes[1].node, 0, nodes[1].handle_of[0], dgram, len, plain, sizeof plain, &r),
         SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_REFUSED && r.refusal == SIGIL_DIET_REFUSED_BAD_SIGNATURE);
  /* The original still opens: refusals did not move the window. */
  dgram[len - 3] ^= 0x01;
  EXPECT(sigil_diet_node_handle(&nodes[1].node, 0, nodes[1].handle_of[0], dgram, len, plain, sizeof plain, &r),
         SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_MESSAGE && r.len == 7 && memcmp(plain, "altered", 7) == 0);

  /* An unknown node (validly signed hello, identity nobody listed), from an unknown address
   * and from a known neighbour's address. */
  static sigil_diet_node stranger;
  uint8_t s_ecdh[32], s_sign[32], hello[SIGIL_DIET_HELLO_LEN];
  uint32_t h = 0;
  EXPECT(sigil_diet_gen_key_pair(&p, s_ecdh, 32, pub, sizeof pub), SIGIL_OK);
  EXPECT(sigil_diet_gen_key_pair(&p, s_sign, 32, pub, sizeof pub), SIGIL_OK);
  EXPECT(sigil_diet_node_init(&stranger, sizeof stranger, s_ecdh, 32, s_sign, 32, 1, NULL), SIGIL_OK);
  EXPECT(sigil_diet_node_add_neighbour(&stranger, 0, nodes[2].id, 16, &h), SIGIL_OK);
  EXPECT(sigil_diet_node_poll_transmit(&stranger, 0, hello, sizeof hello, &len, &h), SIGIL_OK);
  TRUE(len == SIGIL_DIET_HELLO_LEN);
  EXPECT(sigil_diet_node_handle(&nodes[2].node, 0, SIGIL_DIET_UNKNOWN_NEIGHBOUR, hello, len, NULL, 0, &r), SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_REFUSED && r.refusal == SIGIL_DIET_REFUSED_UNTRUSTED);
  EXPECT(sigil_diet_node_handle(&nodes[2].node, 0, nodes[2].handle_of[0], hello, len, NULL, 0, &r), SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_REFUSED && r.refusal == SIGIL_DIET_REFUSED_UNTRUSTED);
  /* A known node's hello from another neighbour's address is refused too. */
  static sigil_diet_node again;
  EXPECT(sigil_diet_node_init(&again, sizeof again, ecdh[0], 32, sign[0], 32, 2, NULL), SIGIL_OK);
  EXPECT(sigil_diet_node_add_neighbour(&again, 0, nodes[2].id, 16, &h), SIGIL_OK);
  EXPECT(sigil_diet_node_poll_transmit(&again, 0, hello, sizeof hello, &len, &h), SIGIL_OK);
  EXPECT(sigil_diet_node_handle(&nodes[2].node, 0, nodes[2].handle_of[1], hello, len, NULL, 0, &r), SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_REFUSED && r.refusal == SIGIL_DIET_REFUSED_UNTRUSTED);
  /* Our own hello reflected back. */
  EXPECT(sigil_diet_node_handle(&again, 0, h, hello, len, NULL, 0, &r), SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_REFUSED && r.refusal == SIGIL_DIET_REFUSED_REFLECTED);
  /* Garbage. */
  EXPECT(sigil_diet_node_handle(&nodes[2].node, 0, nodes[2].handle_of[0], (const uint8_t *)"\x07zz", 3, NULL, 0, &r),
         SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_REFUSED && r.refusal == SIGIL_DIET_REFUSED_MALFORMED);
  /* A message from an address without keys. */
  EXPECT(sigil_diet_node_send(&nodes[0].node, nodes[0].handle_of[2], (const uint8_t *)"x", 1, dgram, sizeof dgram,
                              &len),
         SIGIL_OK);
  EXPECT(sigil_diet_node_handle(&nodes[2].node, 0, SIGIL_DIET_UNKNOWN_NEIGHBOUR, dgram, len, plain, sizeof plain, &r),
         SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_REFUSED && r.refusal == SIGIL_DIET_REFUSED_NO_SESSION);

  sigil_diet_counters c1 = counters_of(1), c2 = counters_of(2);
  TRUE(c1.replayed == 1 && c1.bad_tag == 2 && c1.bad_signature == 1 && c1.messages_accepted == 4);
  TRUE(c1.refused == 4);
  TRUE(c2.untrusted == 3 && c2.malformed == 1 && c2.no_session == 1 && c2.refused == 5);
  TRUE(c2.messages_accepted == 2);

  /* No session yet: the stranger cannot send; a neighbour never answering becomes unreachable. */
  EXPECT(sigil_diet_node_send(&stranger, 0, (const uint8_t *)"x", 1, dgram, sizeof dgram, &len),
         SIGIL_ERR_NO_SESSION);
  uint64_t at = 0, now = 0;
  int hellos = 1;
  for (int k = 0; k < 20; k++) {
    EXPECT(sigil_diet_node_poll_timeout(&stranger, &at), SIGIL_OK);
    if (at == SIGIL_NEVER) break;
    now = at;
    EXPECT(sigil_diet_node_poll_transmit(&stranger, now, hello, sizeof hello, &len, &h), SIGIL_OK);
    if (len) hellos++;
  }
  sigil_diet_phase ph = 0;
  EXPECT(sigil_diet_node_phase(&stranger, 0, &ph), SIGIL_OK);
  TRUE(ph == SIGIL_DIET_UNREACHABLE && hellos == 8 && at == SIGIL_NEVER);
  /* Adding it again restarts the hellos. */
  EXPECT(sigil_diet_node_add_neighbour(&stranger, now, nodes[2].id, 16, &h), SIGIL_OK);
  TRUE(h == 0);
  EXPECT(sigil_diet_node_phase(&stranger, 0, &ph), SIGIL_OK);
  TRUE(ph == SIGIL_DIET_HANDSHAKE);

  for (int i = 0; i < 3; i++) EXPECT(sigil_diet_node_end(&nodes[i].node), SIGIL_OK);
  EXPECT(sigil_diet_node_end(&stranger), SIGIL_OK);
  EXPECT(sigil_diet_node_end(&again), SIGIL_OK);
}

/* Every node call with NULL pointers, short buffers, bad lengths and bad handles. */
static void node_arguments(void) {
  static sigil_diet_node node;
  static const uint8_t zero[32];
  const uint8_t *e = KAT_NODE_RUST_ECDH, *s = KAT_NODE_RUST_SIGNING;
  uint8_t buf[SIGIL_DIET_HELLO_LEN], id[16], plain[16];
  size_t len = 0;
  uint32_t h = 0;
  uint64_t at = 0;
  sigil_diet_received r;
  sigil_diet_counters c;
  sigil_diet_phase ph;
  sigil_diet_config cfg;

  TRUE(sizeof node == SIGIL_DIET_NODE_SIZE);
  EXPECT(sigil_diet_config_default(NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_config_default(&cfg), SIGIL_OK);

  /* Before init, and after end: not initialised. */
  memset(&node, 0, sizeof node);
  EXPECT(sigil_diet_node_identity(&node, id, sizeof id), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_diet_node_add_neighbour(&node, 0, KAT_KEY_PAIR_PUBLIC, 65, &h), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_diet_node_handle(&node, 0, 0, buf, 1, NULL, 0, &r), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_diet_node_poll_transmit(&node, 0, buf, sizeof buf, &len, &h), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_diet_node_poll_timeout(&node, &at), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_diet_node_send(&node, 0, plain, 1, buf, sizeof buf, &len), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_diet_node_phase(&node, 0, &ph), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_diet_node_counters(&node, &c), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_diet_node_end(&node), SIGIL_OK);

  /* init */
  EXPECT(sigil_diet_node_init(NULL, sizeof node, e, 32, s, 32, 1, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_init(&node, sizeof node - 1, e, 32, s, 32, 1, NULL), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_node_init(&node, sizeof node, NULL, 32, s, 32, 1, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_init(&node, sizeof node, e, 31, s, 32, 1, NULL), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_node_init(&node, sizeof node, e, 32, NULL, 32, 1, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_init(&node, sizeof node, e, 32, s, 64, 1, NULL), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_node_init(&node, sizeof node, zero, 32, s, 32, 1, NULL), SIGIL_ERR_INVALID_KEY);
  EXPECT(sigil_diet_node_init(&node, sizeof node, e, 32, zero, 32, 1, NULL), SIGIL_ERR_INVALID_KEY);
  cfg.hello_initial_ms = 0;
  EXPECT(sigil_diet_node_init(&node, sizeof node, e, 32, s, 32, 1, &cfg), SIGIL_ERR_CONFIG);
  cfg.hello_initial_ms = 5000;
  cfg.hello_max_ms = 4000;
  EXPECT(sigil_diet_node_init(&node, sizeof node, e, 32, s, 32, 1, &cfg), SIGIL_ERR_CONFIG);
  EXPECT(sigil_diet_config_default(&cfg), SIGIL_OK);
  cfg.hello_attempts = 0;
  EXPECT(sigil_diet_node_init(&node, sizeof node, e, 32, s, 32, 1, &cfg), SIGIL_ERR_CONFIG);
  EXPECT(sigil_diet_node_identity(&node, id, sizeof id), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_diet_node_init(&node, sizeof node, e, 32, s, 32, 1, NULL), SIGIL_OK);
  /* Initialising again ends the old state first. */
  EXPECT(sigil_diet_node_init(&node, sizeof node, e, 32, s, 32, 2, NULL), SIGIL_OK);

  /* identity */
  EXPECT(sigil_diet_node_identity(NULL, id, sizeof id), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_identity(&node, NULL, sizeof id), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_identity(&node, id, 15), SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_diet_node_identity(&node, id, sizeof id), SIGIL_OK);

  /* add_neighbour: by identity or key; the same identity twice is one neighbour. */
  uint8_t other_id[16];
  sigil_key key = {SIGIL_ALG_ECDSA_P256, KAT_KEY_PAIR_PUBLIC, 65};
  EXPECT(sigil_identity_of_key(&key, NULL, 0, other_id, sizeof other_id), SIGIL_OK);
  EXPECT(sigil_diet_node_add_neighbour(&node, 0, KAT_KEY_PAIR_PUBLIC, 65, &h), SIGIL_OK);
  TRUE(h == 0);
  EXPECT(sigil_diet_node_add_neighbour(&node, 0, other_id, 16, &h), SIGIL_OK);
  TRUE(h == 0);
  EXPECT(sigil_diet_node_add_neighbour(NULL, 0, other_id, 16, &h), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_add_neighbour(&node, 0, NULL, 16, &h), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_add_neighbour(&node, 0, other_id, 16, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_add_neighbour(&node, 0, other_id, 15, &h), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_node_add_neighbour(&node, 0, KAT_KEY_PAIR_PUBLIC, 33, &h), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_node_add_neighbour(&node, 0, KAT_KEY_PAIR_PUBLIC, 66, &h), SIGIL_ERR_BAD_LENGTH);
  uint8_t compressed[65];
  memcpy(compressed, KAT_KEY_PAIR_PUBLIC, 65);
  compressed[0] = 0x02;
  EXPECT(sigil_diet_node_add_neighbour(&node, 0, compressed, 65, &h), SIGIL_ERR_INVALID_KEY);
  /* The table holds SIGIL_DIET_MAX_NEIGHBOURS. */
  for (int i = 1; i < SIGIL_DIET_MAX_NEIGHBOURS; i++) {
    uint8_t some[16];
    memset(some, i, sizeof some);
    EXPECT(sigil_diet_node_add_neighbour(&node, 0, some, 16, &h), SIGIL_OK);
    TRUE(h == (uint32_t)i);
  }
  uint8_t one_more[16];
  memset(one_more, 0xEE, sizeof one_more);
  EXPECT(sigil_diet_node_add_neighbour(&node, 0, one_more, 16, &h), SIGIL_ERR_TABLE_FULL);

  /* handle */
  EXPECT(sigil_diet_node_handle(NULL, 0, 0, buf, 1, NULL, 0, &r), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_handle(&node, 0, 0, NULL, 1, NULL, 0, &r), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_handle(&node, 0, 0, buf, 0, NULL, 0, &r), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_node_handle(&node, 0, 0, buf, 1, NULL, 0, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_handle(&node, 0, 0, buf, 1, NULL, 4, &r), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_handle(&node, 0, SIGIL_DIET_MAX_NEIGHBOURS, buf, 1, NULL, 0, &r), SIGIL_ERR_BAD_ARGUMENT);
  EXPECT(sigil_diet_node_handle(&node, 0, 0xFFFFFFFEu, buf, 1, NULL, 0, &r), SIGIL_ERR_BAD_ARGUMENT);
  /* A data datagram whose plaintext does not fit: nothing done, nothing counted. */
  memset(buf, 0, sizeof buf);
  buf[0] = 0x02;
  EXPECT(sigil_diet_node_handle(&node, 0, 0, buf, SIGIL_DIET_OVERHEAD + 17, plain, sizeof plain, &r),
         SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_diet_node_counters(&node, &c), SIGIL_OK);
  TRUE(c.refused == 0);
  EXPECT(sigil_diet_node_handle(&node, 0, 0, buf, SIGIL_DIET_OVERHEAD + 16, plain, sizeof plain, &r), SIGIL_OK);
  TRUE(r.outcome == SIGIL_DIET_REFUSED && r.refusal == SIGIL_DIET_REFUSED_NO_SESSION);

  /* poll_transmit */
  EXPECT(sigil_diet_node_poll_transmit(NULL, 0, buf, sizeof buf, &len, &h), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_poll_transmit(&node, 0, NULL, sizeof buf, &len, &h), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_poll_transmit(&node, 0, buf, SIGIL_DIET_HELLO_LEN - 1, &len, &h), SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_diet_node_poll_transmit(&node, 0, buf, sizeof buf, NULL, &h), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_poll_transmit(&node, 0, buf, sizeof buf, &len, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_poll_transmit(&node, 0, buf, sizeof buf, &len, &h), SIGIL_OK);
  TRUE(len == SIGIL_DIET_HELLO_LEN);

  /* poll_timeout */
  EXPECT(sigil_diet_node_poll_timeout(NULL, &at), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_poll_timeout(&node, NULL), SIGIL_ERR_NULL);

  /* send */
  uint8_t out[SIGIL_DIET_OVERHEAD + 4];
  EXPECT(sigil_diet_node_send(NULL, 0, plain, 4, out, sizeof out, &len), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_send(&node, SIGIL_DIET_MAX_NEIGHBOURS, plain, 4, out, sizeof out, &len),
         SIGIL_ERR_BAD_ARGUMENT);
  EXPECT(sigil_diet_node_send(&node, SIGIL_DIET_UNKNOWN_NEIGHBOUR, plain, 4, out, sizeof out, &len),
         SIGIL_ERR_BAD_ARGUMENT);
  EXPECT(sigil_diet_node_send(&node, 0, NULL, 4, out, sizeof out, &len), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_send(&node, 0, plain, 4, NULL, sizeof out, &len), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_send(&node, 0, plain, 4, out, sizeof out - 1, &len), SIGIL_ERR_SHORT_BUFFER);
  EXPECT(sigil_diet_node_send(&node, 0, plain, 4, out, sizeof out, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_send(&node, 0, plain, SIZE_MAX - 10, out, sizeof out, &len), SIGIL_ERR_BAD_LENGTH);
  EXPECT(sigil_diet_node_send(&node, 0, plain, 4, out, sizeof out, &len), SIGIL_ERR_NO_SESSION);

  /* phase, counters */
  EXPECT(sigil_diet_node_phase(NULL, 0, &ph), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_phase(&node, 0, NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_phase(&node, SIGIL_DIET_MAX_NEIGHBOURS, &ph), SIGIL_ERR_BAD_ARGUMENT);
  EXPECT(sigil_diet_node_counters(NULL, &c), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_counters(&node, NULL), SIGIL_ERR_NULL);

  /* end: the state is zeroed, secrets with it. */
  EXPECT(sigil_diet_node_end(NULL), SIGIL_ERR_NULL);
  EXPECT(sigil_diet_node_end(&node), SIGIL_OK);
  static const sigil_diet_node zeroed;
  TRUE(memcmp(&node, &zeroed, sizeof node) == 0);
  EXPECT(sigil_diet_node_counters(&node, &c), SIGIL_ERR_NOT_BOOTED);
  EXPECT(sigil_diet_node_end(&node), SIGIL_OK);
}

int main(void) {
  key_pairs();
  shared_keys();
  aes_ccm();
  signatures();
  node_against_pyca();
  three_nodes();
  node_arguments();
  return REPORT();
}
