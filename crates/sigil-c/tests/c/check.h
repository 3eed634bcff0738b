/* The checks the C tests share: each EXPECT or TRUE counts one check, a failing one prints
 * where and why, and REPORT() prints the tally and gives main's exit status. */
#ifndef SIGIL_TEST_CHECK_H
#define SIGIL_TEST_CHECK_H

#include <stdio.h>

static int failures, checks;

#define EXPECT(call, want)                                                          \
  do {                                                                              \
    sigil_status got_ = (call);                                                     \
    checks++;                                                                       \
    if (got_ != (want)) {                                                           \
      failures++;                                                                   \
      fprintf(stderr, "%s:%d: %s = %d, expected %s\n", __FILE__, __LINE__, #call,   \
              (int)got_, #want);                                                    \
    }                                                                               \
  } while (0)

#define TRUE(cond)                                                                  \
  do {                                                                              \
    checks++;                                                                       \
    if (!(cond)) {                                                                  \
      failures++;                                                                   \
      fprintf(stderr, "%s:%d: %s is false\n", __FILE__, __LINE__, #cond);           \
    }                                                                               \
  } while (0)

#define REPORT()                                                                    \
  (printf("%d passed, %d failed\n", checks - failures, failures), failures == 0 ? 0 : 1)

#endif
