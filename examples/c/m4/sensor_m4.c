/*
 * The signing sensor in C on a Cortex-M4: the same program as the Rust image
 * firmware/src/bin/sensor.rs, through libsigil.a's sigil_device calls. First boot (the key from
 * the platform's randomness, kept in RAM-backed storage), registration with the Resource
 * Directory, then three Confirmable signed readings to the broker.
 *
 * The radio is the Rust image's: `sigil_radio_transmit` hands a datagram to the radio (a board
 * writes its radio FIFO there; the device-cost harness intercepts the call and plays the
 * server), and the answer arrives in the `SIGIL_RX` mailbox with its length in `SIGIL_RX_LEN`.
 * `sigil_halt(code)` ends the run (0: done). `SIGIL_ACKED` counts acknowledged readings.
 *
 *   make -C examples/c/m4        # target/c-m4/sensor_m4.elf; tools/devbench/run.py runs it
 */
#include "sigil.h"

/* Readings the image publishes before it stops. */
#define READINGS 3

/* ---- the radio */

volatile uint8_t SIGIL_RX[SIGIL_MAX_DATAGRAM];
volatile uint32_t SIGIL_RX_LEN;
/* Readings acknowledged by the server. */
volatile uint32_t SIGIL_ACKED;

/* Hands a datagram to the radio. */
__attribute__((noinline, used)) void sigil_radio_transmit(const uint8_t *datagram, size_t len) {
  __asm__ volatile("" : : "r"(datagram), "r"(len) : "memory");
}

/* Reached when the image has done its work (or failed, with `code` != 0). */
__attribute__((noinline, noreturn, used)) void sigil_halt(uint32_t code) {
  __asm__ volatile("" : : "r"(code) : "memory");
  for (;;) {
  }
}

/* A panic in the library (valid use cannot reach one) stops the core on an undefined
 * instruction, which the emulator reports; a board resets instead. */
__attribute__((noreturn)) void sigil_panic_hook(void) {
  for (;;) __asm__ volatile("udf #0");
}

/* ---- the platform: randomness and storage */

/* A deterministic stand-in for the hardware TRNG (the Rust image's XorShift, same seed), so
 * runs repeat exactly. A real board reads its TRNG here. */
static uint32_t xorshift_state = 0x2545f491u;

static int32_t xorshift_fill(void *ctx, uint8_t *buf, size_t len) {
  (void)ctx;
  uint32_t x = xorshift_state;
  for (size_t i = 0; i < len; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    buf[i] = (uint8_t)x;
  }
  xorshift_state = x;
  return 0;
}

/* Storage in RAM, one record per slot; a board keeps these in flash. */
static struct {
  uint8_t key[SIGIL_KEY_RECORD_LEN];
  uint8_t sequence[SIGIL_SEQUENCE_RECORD_LEN];
  uint8_t key_len, sequence_len;
} storage;

static int32_t storage_read(void *ctx, uint32_t slot, uint8_t *buf, size_t cap) {
  (void)ctx;
  const uint8_t *rec = slot == SIGIL_SLOT_KEY ? storage.key : storage.sequence;
  size_t n = slot == SIGIL_SLOT_KEY ? storage.key_len : storage.sequence_len;
  if (slot > SIGIL_SLOT_SEQUENCE || n > cap) return -1;
  for (size_t i = 0; i < n; i++) buf[i] = rec[i];
  return (int32_t)n;
}

static int32_t storage_write(void *ctx, uint32_t slot, const uint8_t *buf, size_t len) {
  (void)ctx;
  uint8_t *rec = slot == SIGIL_SLOT_KEY ? storage.key : storage.sequence;
  size_t cap = slot == SIGIL_SLOT_KEY ? sizeof storage.key : sizeof storage.sequence;
  if (slot > SIGIL_SLOT_SEQUENCE || len > cap) return -1;
  for (size_t i = 0; i < len; i++) rec[i] = buf[i];
  if (slot == SIGIL_SLOT_KEY) storage.key_len = (uint8_t)len;
  else storage.sequence_len = (uint8_t)len;
  return 0;
}

/* ---- the sensor */

static sigil_device dev; /* SIGIL_DEVICE_SIZE bytes, static: no heap, off the stack */
static uint8_t buf[SIGIL_MAX_DATAGRAM];

static void send(void) {
  size_t len;
  while (sigil_device_poll_transmit(&dev, buf, sizeof buf, &len) == SIGIL_OK && len > 0)
    sigil_radio_transmit(buf, len);
}

/* Takes the datagram waiting in the mailbox, if any: its length, or 0. */
static size_t receive(void) {
  size_t n = SIGIL_RX_LEN;
  if (n == 0 || n > SIGIL_MAX_DATAGRAM) return 0;
  for (size_t i = 0; i < n; i++) buf[i] = SIGIL_RX[i];
  SIGIL_RX_LEN = 0;
  return n;
}

int main(void) {
  static const sigil_platform platform = {xorshift_fill, storage_read, storage_write, 0};
  static const sigil_record reading[1] = {{"t", "Cel", 21.5}};
  sigil_device_config cfg;
  sigil_device_config_default(&cfg); /* Ed25519, COSE, every reading Confirmable */
  if (sigil_device_boot(&dev, sizeof dev, &cfg, &platform, 0, 0, 0, 0) != SIGIL_OK)
    sigil_halt(1);
  uint64_t now = 0;
  if (sigil_device_handle_timeout(&dev, now) != SIGIL_OK) sigil_halt(2);
  send();
  unsigned published = 0;
  sigil_device_info info;
  for (;;) {
    sigil_device_get_info(&dev, &info);
    if (published >= READINGS && info.can_publish) break;
    now += 10;
    size_t n = receive();
    if (n > 0) {
      if (sigil_device_handle_datagram(&dev, now, buf, n) != SIGIL_OK) sigil_halt(3);
      sigil_event ev;
      while (sigil_device_poll_event(&dev, &ev) == SIGIL_OK && ev.kind != SIGIL_EVENT_NONE)
        if (ev.kind == SIGIL_EVENT_ACKNOWLEDGED) SIGIL_ACKED++;
    } else if (info.can_publish && published < READINGS) {
      if (sigil_device_publish(&dev, now, reading, 1, -1, 0) != SIGIL_OK) sigil_halt(4);
      published++;
    } else if (sigil_device_handle_timeout(&dev, now) != SIGIL_OK) {
      sigil_halt(5);
    }
    send();
  }
  sigil_halt(0);
}
