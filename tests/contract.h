/*
 * contract.h: the statuses each public call documents, against those the suite observes.
 *
 * include/embcache.h lists, in the comment right above each `EMC_API emc_status emc_x(`
 * declaration, every status other than EMC_OK the call can return. emct_contract_load parses
 * those lists (every EMC_E* token in the comment). Tests route public calls through
 * EMCT_CALL, which records (function, status); emct_contract_check then fails the test when a
 * call returned a status its declaration does not list, naming the function, the status and
 * the last detail seen with it.
 *
 *   st = EMCT_CALL(emc_store_open, path, &s);
 */
#ifndef EMC_TESTS_CONTRACT_H
#define EMC_TESTS_CONTRACT_H

#include "embcache.h"

/* Record fn's status (and the current detail when it failed); returns st. */
emc_status emct_record(const char *fn, emc_status st);
#define EMCT_CALL(fn, ...) emct_record(#fn, fn(__VA_ARGS__))

/* Parse include/embcache.h (EMC_HEADER_PATH); fails the test when it cannot. Returns the
 * number of emc_status functions found. Idempotent. */
int emct_contract_load(void);
/* Bit mask (1u << status) of the statuses fn documents, EMC_OK included; 0 if fn is not an
 * emc_status function of the header. */
unsigned emct_contract_documented(const char *fn);
/* Fail the test if any recorded status is not documented; print what was observed (one line
 * per function: name, calls, statuses) to stdout when verbose. */
void emct_contract_check(int verbose);
/* Forget the observations. */
void emct_contract_reset(void);

#endif /* EMC_TESTS_CONTRACT_H */
