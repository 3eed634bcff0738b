"""The seeds' boards: clock and active power, each with its source. Energy of an operation is
cycles / clock x power (CPU active only; radio and sleep are the link emulator's business)."""

BOARDS = [
    {
        "name": "CC2538 @ 32 MHz",
        "core": "cortex-m4",  # a Cortex-M3; see CORE_NOTE
        "hz": 32e6,
        "watts": 0.060,
        "source": "IoT-CryptoDiet Table 3 / Table 1: 78.3 mJ over 1.305 s (ECC_GenKeyPair) = 60 mW",
    },
    {
        "name": "OPAL (SAM3U) @ 48 MHz",
        "core": "cortex-m4",
        "hz": 48e6,
        "watts": 0.030 * 3.998,
        "source": "two-way-auth paper Table 2 and §5.4: 30 mA computation at 48 MHz, 3.998 V battery",
    },
    {
        "name": "OPAL (SAM3U) @ 96 MHz",
        "core": "cortex-m4",
        "hz": 96e6,
        "watts": 0.048 * 3.998,
        "source": "two-way-auth paper Table 3: 48 mA at 96 MHz, 3.998 V",
    },
    {
        "name": "Cortex-M0+ @ 48 MHz",
        "core": "cortex-m0plus",
        "hz": 48e6,
        "watts": 0.006 * 3.0,
        "source": "assumed 6 mA at 3.0 V, the order of Kinetis KL2x run-mode figures (RFC 8387 "
                  "Table 7's FRDM-KL25Z); the seeds give no current. Replace with your part's datasheet",
    },
    {
        "name": "ATmega (MagoNode) @ 16 MHz",
        "core": "avr",
        "hz": 16e6,
        "watts": 0.19017 / 13.487,
        "source": "DTLS-as-CoAP-resource Table II: 190.17 mJ over 13,487 ms (base scalar "
                  "multiplication) = 14.1 mW",
    },
]

CORE_NOTE = (
    "CC2538 and SAM3U are Cortex-M3 cores; their rows use the Cortex-M4 model's cycles of the "
    "portable backend. The M3 takes 3-5 cycles for a long multiply where the M4 takes 1 and has "
    "no UMAAL, so the M3 figures are lower bounds, and the fast backend (which needs ARMv7E-M) "
    "does not apply to them."
)
