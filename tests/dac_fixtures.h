/* dac_fixtures.h - reading the DAC golden fixtures, shared by test_dac.c
 * and test_dac_encode.c. */
#ifndef OMNI_TESTS_DAC_FIXTURES_H
#define OMNI_TESTS_DAC_FIXTURES_H

#include <stdint.h>

/* A [codebooks][frames] JSON file -> codes[q * n_frames + f] (malloc'ed);
 * NULL if unreadable. */
int32_t *dac_fixture_codes(const char *path, int *n_q, int64_t *n_frames);

#endif
