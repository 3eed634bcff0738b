/*
 * A minimal Cortex-M startup for the C sensor: the vector table (initial stack pointer, reset
 * and fault handlers) and the reset handler, which copies .data from flash, zeroes .bss,
 * enables the FPU (the library is built for hard float) and calls main. The symbols come from
 * sensor_m4.ld. The device-cost harness loads .data and clears RAM itself and calls main
 * directly; a board starts here.
 */
#include <stdint.h>

extern uint32_t __sidata, __sdata, __edata, __sbss, __ebss, _stack_start;
int main(void);

__attribute__((noreturn)) void Reset_Handler(void) {
  const uint32_t *src = &__sidata;
  for (uint32_t *dst = &__sdata; dst < &__edata;) *dst++ = *src++;
  for (uint32_t *dst = &__sbss; dst < &__ebss;) *dst++ = 0;
  /* CPACR: full access to CP10 and CP11 (the FPU). */
  *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
  __asm__ volatile("dsb\n\tisb" ::: "memory");
  main();
  for (;;) {
  }
}

/* Any fault or unexpected interrupt: stop here (a board resets). */
__attribute__((noreturn)) static void Default_Handler(void) {
  for (;;) {
  }
}

/* Cortex-M4 system exceptions: SP, Reset, NMI, HardFault, MemManage, BusFault, UsageFault,
 * four reserved, SVCall, DebugMonitor, reserved, PendSV, SysTick. */
__attribute__((section(".vector_table"), used))
static const void *const vector_table[16] = {
    &_stack_start,   (const void *)Reset_Handler,   (const void *)Default_Handler,
    (const void *)Default_Handler, (const void *)Default_Handler, (const void *)Default_Handler,
    (const void *)Default_Handler, 0, 0, 0, 0,
    (const void *)Default_Handler, (const void *)Default_Handler, 0,
    (const void *)Default_Handler, (const void *)Default_Handler,
};
