/* Runs the ATmega2560 image of Sigil's measured operations under simavr, cycle-exact.
 *
 * usage: avr_harness IMAGE.elf MARK_PC OUT_ADDR OUT_LEN_ADDR STACK_BOTTOM
 *
 * The image calls sigil_mark(i) before operation i and sigil_mark(0x80 | i) after it
 * (0xff when done, 0xfe on panic). At each mark this reads simavr's cycle counter; before an
 * operation it paints the free stack (STACK_BOTTOM up to SP) and afterwards finds the deepest
 * overwritten byte. One JSON object per operation goes to stdout. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <simavr/sim_avr.h>
#include <simavr/sim_elf.h>

#define PAINT 0xA5
#define LIMIT 20000000000ULL

static uint16_t sp(avr_t *avr) { return avr->data[0x5d] | (avr->data[0x5e] << 8); }

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s IMAGE MARK_PC OUT_ADDR OUT_LEN_ADDR STACK_BOTTOM\n", argv[0]);
        return 64;
    }
    elf_firmware_t fw;
    memset(&fw, 0, sizeof fw);
    if (elf_read_firmware(argv[1], &fw) != 0) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 66;
    }
    uint32_t mark = strtoul(argv[2], 0, 0);
    uint16_t out = strtoul(argv[3], 0, 0), out_len = strtoul(argv[4], 0, 0);
    uint16_t bottom = strtoul(argv[5], 0, 0);
    avr_t *avr = avr_make_mcu_by_name("atmega2560");
    if (!avr) return 69;
    avr_init(avr);
    avr->log = 0;
    avr_load_firmware(avr, &fw);

    avr_cycle_count_t start = 0;
    uint16_t sp_start = 0;
    for (;;) {
        int state = avr_run(avr);
        if (state == cpu_Done || state == cpu_Crashed) {
            fprintf(stderr, "simavr stopped (state %d) at pc=0x%x\n", state, avr->pc);
            return 70;
        }
        if (avr->cycle > LIMIT) {
            fprintf(stderr, "cycle limit at pc=0x%x\n", avr->pc);
            return 71;
        }
        if (avr->pc != mark) continue;
        uint8_t op = avr->data[24]; /* first argument: r24 */
        if (op == 0xff) return 0;
        if (op == 0xfe) {
            fprintf(stderr, "panic in the image\n");
            return 72;
        }
        if (!(op & 0x80)) {
            sp_start = sp(avr);
            memset(&avr->data[bottom], PAINT, sp_start - bottom);
            start = avr->cycle;
        } else {
            avr_cycle_count_t cycles = avr->cycle - start;
            uint16_t a = bottom;
            while (a < sp_start && avr->data[a] == PAINT) a++;
            uint16_t n = avr->data[out_len] | (avr->data[out_len + 1] << 8);
            printf("{\"op\": %u, \"cycles\": %llu, \"stack\": %u, \"output\": \"", op & 0x7f,
                   (unsigned long long)cycles, (unsigned)(sp_start - a));
            for (uint16_t i = 0; i < n && i < 512; i++) printf("%02x", avr->data[out + i]);
            printf("\"}\n");
            fflush(stdout);
        }
        /* step past the mark so the same pc does not count twice */
        avr_run(avr);
    }
}
