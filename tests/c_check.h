/* CHECK / CHECK_MSG for the C API tests: count checks, print each failure, keep going.
 * Each test file defines `failures` and `checks` (static ints) before including this. */
#ifndef CIRCLEROPE_TESTS_C_CHECK_H
#define CIRCLEROPE_TESTS_C_CHECK_H

#include <stdio.h>

#define CHECK_MSG(cond, msg)                                                                    \
  do {                                                                                          \
    ++checks;                                                                                   \
    if (!(cond)) {                                                                              \
      ++failures;                                                                               \
      fprintf(stderr, "%s:%d: check failed: %s (message: \"%s\")\n", __FILE__, __LINE__, #cond, msg); \
    }                                                                                           \
  } while (0)
#define CHECK(cond) CHECK_MSG(cond, "")

#endif /* CIRCLEROPE_TESTS_C_CHECK_H */
