/* The check of the native test programs: a failed condition is printed with its place and
 * counted in `failures`, which main() turns into the exit status. */
#ifndef TIRL_TEST_CHECK_H
#define TIRL_TEST_CHECK_H

#include <stdio.h>

static int failures = 0;

#define CHECK(cond, ...)                                     \
  do {                                                       \
    if (!(cond)) {                                           \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);   \
      fprintf(stderr, __VA_ARGS__);                          \
      fprintf(stderr, "\n");                                 \
      ++failures;                                            \
    }                                                        \
  } while (0)

#endif
