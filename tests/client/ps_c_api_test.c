/* The parameter-server worker's C ABI (gradex.h, gradex_ps_*) from C: one
 * worker with rank 0's embedded coordinator and hosted server, three steps,
 * its stats, and bad input refused with a status and a message. */
#include <stdio.h>
#include <string.h>

#include "services/client/gradex.h"

#define CHECK(cond)                                                                               \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      fprintf(stderr, "%s:%d: %s failed (%s)\n", __FILE__, __LINE__, #cond, gradex_last_error()); \
      return 1;                                                                                   \
    }                                                                                             \
  } while (0)

int main(void) {
  const uint32_t layers[] = {8, 4};
  const char* keys[] = {"job", "rank", "world_size", "timeout_ms", "density"};
  const char* vals[] = {"cps", "0", "1", "20000", "0.5"};
  gradex_ps_worker* w = NULL;
  const char* bad_keys[] = {"densty"};
  const char* bad_vals[] = {"0.5"};
  CHECK(gradex_ps_create(layers, 2, bad_keys, bad_vals, 1, 0, NULL, &w) == GRADEX_INVALID_ARGUMENT);
  CHECK(strstr(gradex_last_error(), "densty") != NULL);
  CHECK(w == NULL);
  CHECK(gradex_ps_create(NULL, 0, keys, vals, 5, 0, NULL, &w) == GRADEX_INVALID_ARGUMENT);
  CHECK(gradex_ps_create(layers, 2, keys, vals, 5, 0, NULL, &w) == GRADEX_OK);
  float grad[12], params[12];
  for (int i = 0; i < 12; ++i) {
    grad[i] = (float)(i % 5) - 2.0f;
    params[i] = 1.0f;
  }
  for (int s = 0; s < 3; ++s) CHECK(gradex_ps_step(w, grad, params, 12, 0.1f) == GRADEX_OK);
  CHECK(gradex_ps_step(w, grad, params, 11, 0.1f) == GRADEX_INVALID_ARGUMENT);
  CHECK(gradex_ps_step(w, NULL, params, 12, 0.1f) == GRADEX_INVALID_ARGUMENT);
  gradex_ps_stats_t st;
  CHECK(gradex_ps_stats(w, &st) == GRADEX_OK);
  CHECK(st.steps == 3 && st.failed_steps == 0);
  CHECK(st.version == 3); /* one worker, one shard: each push is a version */
  CHECK(st.full_syncs >= 1 && st.sent_bytes > 0 && st.recv_bytes > 0);
  /* The only worker's params are the model: each step moved them. */
  CHECK(params[0] != 1.0f);
  CHECK(gradex_ps_close(w) == GRADEX_OK);
  CHECK(gradex_ps_step(w, grad, params, 12, 0.1f) == GRADEX_FAILED_PRECONDITION);
  gradex_ps_destroy(w);
  gradex_ps_destroy(NULL);
  printf("ok\n");
  return 0;
}
