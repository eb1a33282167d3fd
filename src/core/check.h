// Contract checks for programming errors (never for bad input, which gets an Error).
#pragma once

#include <cstdio>
#include <cstdlib>

#define QR_CHECK(cond, what)                                                               \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "qrepack: internal contract violated at %s:%d: %s\n", __FILE__, \
                   __LINE__, what);                                                        \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)
