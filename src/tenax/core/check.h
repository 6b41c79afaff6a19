// TENAX_CHECK: for bugs (broken invariants), never for bad input. Aborts with file:line so a
// core dump and the launcher's crash report point at the line.
#pragma once

#include <cstdio>
#include <cstdlib>

#define TENAX_CHECK(cond)                                                                    \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "tenax: CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

#define TENAX_CHECK_MSG(cond, msg)                                                               \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      std::fprintf(stderr, "tenax: CHECK failed at %s:%d: %s (%s)\n", __FILE__, __LINE__, #cond, \
                   (msg));                                                                       \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)
