/* The C ABI (gradex.h) from C: a one-rank client with an embedded
 * coordinator, blocking and async exchanges, flush, save/load state, and bad
 * input (unknown option, NULL handles, a corrupted state, wrong memory kind)
 * refused with a status and a message. Exit status 0 = pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "services/client/gradex.h"

static int failures = 0;

#define CHECK(cond)                                               \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, "%s:%d: CHECK(%s) failed (last error: %s)\n", \
              __FILE__, __LINE__, #cond, gradex_last_error());    \
      ++failures;                                                 \
    }                                                             \
  } while (0)

static int async_status = -1;
static void on_done(void* user, int status, const char* message) {
  (void)message;
  *(int*)user = status;
}

int main(void) {
  gradex_client* c = NULL;
  /* Bad options: a clear status and message, no handle. */
  const char* bad_keys[] = {"no_such_option"};
  const char* bad_vals[] = {"1"};
  CHECK(gradex_create(bad_keys, bad_vals, 1, 0, NULL, &c) == GRADEX_INVALID_ARGUMENT);
  CHECK(c == NULL);
  CHECK(strstr(gradex_last_error(), "no_such_option") != NULL);
  const char* bad_density_keys[] = {"density"};
  const char* bad_density_vals[] = {"two"};
  CHECK(gradex_create(bad_density_keys, bad_density_vals, 1, 0, NULL, &c) ==
        GRADEX_INVALID_ARGUMENT);
  const char* far_density_vals[] = {"2"};
  CHECK(gradex_create(bad_density_keys, far_density_vals, 1, 0, NULL, &c) ==
        GRADEX_INVALID_ARGUMENT);
  CHECK(strstr(gradex_last_error(), "density") != NULL);
  CHECK(strstr(gradex_last_error(), "(0, 1]") != NULL); /* the option table's range */
  const char* bad_flag_keys[] = {"pipeline"};
  const char* bad_flag_vals[] = {"on"};
  CHECK(gradex_create(bad_flag_keys, bad_flag_vals, 1, 0, NULL, &c) == GRADEX_INVALID_ARGUMENT);
  CHECK(strstr(gradex_last_error(), "pipeline") != NULL);
  CHECK(gradex_create(NULL, NULL, 0, 0, NULL, NULL) == GRADEX_INVALID_ARGUMENT);
  CHECK(gradex_flush(NULL) == GRADEX_INVALID_ARGUMENT);
  CHECK(gradex_rank(NULL) == -1);

  /* dense-ring on one rank: the sum is the gradient itself. */
  const char* keys[] = {"job",
                        "algorithm",
                        "world_size",
                        "rank",
                        "mean",
                        "timeout_ms",
                        "refuse_nonfinite",
                        "pipeline",
                        "allow_plan_override"};
  const char* vals[] = {"c-api", "dense-ring", "1", "0", "1", "20000", "1", "1", "0"};
  int rc = gradex_create(keys, vals, 9, 0, NULL, &c);
  CHECK(rc == GRADEX_OK);
  if (rc != GRADEX_OK) return 1;

  float data[100], want[100];
  for (int i = 0; i < 100; ++i) want[i] = data[i] = (float)(i % 9) - 4.0f;
  uint64_t span_keys[2] = {7, 8};
  size_t span_elements[2] = {60, 40};
  CHECK(gradex_allreduce(c, span_keys, span_elements, 2, data, 100, GRADEX_HOST, 1) == GRADEX_OK);
  CHECK(memcmp(data, want, sizeof(data)) == 0);
  CHECK(gradex_rank(c) == 0);
  CHECK(gradex_world_size(c) == 1);
  CHECK(gradex_step(c) == 1);

  CHECK(gradex_allreduce_async(c, span_keys, span_elements, 2, data, 100, GRADEX_HOST, 1,
                               on_done, &async_status) == GRADEX_OK);
  CHECK(gradex_flush(c) == GRADEX_OK);
  CHECK(async_status == GRADEX_OK);
  CHECK(memcmp(data, want, sizeof(data)) == 0);

  /* Bad buckets: spans that do not cover the data, unknown memory kind. */
  size_t wrong[2] = {60, 39};
  CHECK(gradex_allreduce(c, span_keys, wrong, 2, data, 100, GRADEX_HOST, 1) ==
        GRADEX_INVALID_ARGUMENT);
  CHECK(strlen(gradex_last_error()) > 0);
  CHECK(gradex_allreduce(c, span_keys, span_elements, 2, data, 100, 7, 1) ==
        GRADEX_INVALID_ARGUMENT);
  CHECK(gradex_allreduce(c, NULL, span_elements, 2, data, 100, GRADEX_HOST, 1) ==
        GRADEX_INVALID_ARGUMENT);
  CHECK(gradex_allreduce(c, span_keys, span_elements, 2, NULL, 100, GRADEX_HOST, 1) ==
        GRADEX_INVALID_ARGUMENT);

  /* State: round trip, and a corrupted blob refused without a change. */
  char* state = NULL;
  size_t len = 0;
  CHECK(gradex_save_state(c, &state, &len) == GRADEX_OK);
  CHECK(state != NULL && len > 0);
  if (state != NULL) {
    CHECK(gradex_load_state(c, state, len) == GRADEX_OK);
    state[len / 2] ^= 0x10;
    CHECK(gradex_load_state(c, state, len) == GRADEX_INVALID_ARGUMENT);
    CHECK(strstr(gradex_last_error(), "gradex state") != NULL);
    CHECK(gradex_load_state(c, state, 3) == GRADEX_INVALID_ARGUMENT);
    gradex_free(state);
  }
  CHECK(gradex_load_state(c, NULL, 5) == GRADEX_INVALID_ARGUMENT);

  CHECK(gradex_close(c) == GRADEX_OK);
  CHECK(gradex_close(c) == GRADEX_OK); /* idempotent */
  CHECK(gradex_allreduce(c, span_keys, span_elements, 2, data, 100, GRADEX_HOST, 1) ==
        GRADEX_FAILED_PRECONDITION);
  gradex_destroy(c);
  gradex_destroy(NULL);
  if (failures == 0) printf("c_api_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
