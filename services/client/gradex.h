/* gradex C ABI: the client (client.h) for frameworks other than PyTorch.
 *
 * Opaque handles; every call returns an int status (0 = GRADEX_OK, else an
 * absl::StatusCode value) and, on failure, leaves a message for
 * gradex_last_error() on the calling thread. Nothing here throws or aborts
 * on bad input.
 *
 *   gradex_client* c;
 *   const char* keys[] = {"algorithm", "density"};
 *   const char* vals[] = {"spardl", "0.01"};
 *   if (gradex_create(keys, vals, 2, 1, NULL, &c) != GRADEX_OK)
 *     fprintf(stderr, "%s\n", gradex_last_error());
 *   uint64_t key = 0; size_t n = 1000;
 *   gradex_allreduce(c, &key, &n, 1, grad, n, GRADEX_HOST, 1);
 *   gradex_destroy(c);
 */
#ifndef GRADEX_SERVICES_CLIENT_GRADEX_H_
#define GRADEX_SERVICES_CLIENT_GRADEX_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes: absl::StatusCode's values. */
enum {
  GRADEX_OK = 0,
  GRADEX_CANCELLED = 1,
  GRADEX_UNKNOWN = 2,
  GRADEX_INVALID_ARGUMENT = 3,
  GRADEX_DEADLINE_EXCEEDED = 4,
  GRADEX_NOT_FOUND = 5,
  GRADEX_FAILED_PRECONDITION = 9,
  GRADEX_ABORTED = 10,
  GRADEX_UNIMPLEMENTED = 12,
  GRADEX_INTERNAL = 13,
  GRADEX_UNAVAILABLE = 14,
  GRADEX_UNAUTHENTICATED = 16
};

/* Where a bucket's data lives. */
enum { GRADEX_HOST = 0, GRADEX_DEVICE = 1 };

typedef struct gradex_client gradex_client;

/* The message of the last failed gradex call on this thread ("" if none).
 * Valid until the next gradex call on this thread. */
const char* gradex_last_error(void);

/* The trainer's rendezvous store (rank 0 sets, the others get), used when no
 * coordinator is configured. set returns 0 on success. get writes the value
 * (not NUL-terminated) into buf and returns its length, or -1 when the key
 * is not there within the caller's own timeout; a length over cap asks for a
 * larger buffer. */
typedef struct {
  void* user;
  int (*set)(void* user, const char* key, const char* value);
  long (*get)(void* user, const char* key, char* buf, size_t cap);
} gradex_rendezvous;

/* Creates a client: defaults, then the environment when use_env != 0, then
 * count key/value options (unknown keys, unparsable and out-of-range values
 * are GRADEX_INVALID_ARGUMENT naming the key and the range). The keys and
 * variables are the option table's (services/client/option_table.cc; the
 * README's "Configuration" table, `gradex-options`): job, rank, world_size,
 * local_rank, coordinator, token, advertise_host, algorithm, density, teams,
 * param.NAME (an algorithm parameter), start_iter, min_compression_rate,
 * dense_probe_period, max_bucket_elements, timeout_ms, mean (0/1),
 * metrics_port, data_ip, timeline, refuse_nonfinite (0/1), hierarchy (auto/off),
 * node, pipeline (0/1), momentum_correction, factor_masking (0/1),
 * allow_plan_override (0/1).
 * algorithm, density, teams and param.NAME are the job's plan's: asking for
 * other values than the plan joined is GRADEX_INVALID_ARGUMENT unless
 * allow_plan_override=1. rendezvous may be NULL. A metrics_port > 0 is the
 * base of a node's ranks: the client serves on metrics_port + local_rank. */
int gradex_create(const char* const* keys, const char* const* values, size_t count, int use_env,
                  const gradex_rendezvous* rendezvous, gradex_client** out);

/* One bucket: spans (key, elements) in bucket order covering data[0..n).
 * On success data holds the mean (or sum, mean=0) over ranks; on failure it
 * is unchanged and the gradient is kept in the residuals. Blocking. */
int gradex_allreduce(gradex_client* c, const uint64_t* span_keys, const size_t* span_elements,
                     size_t spans, float* data, size_t n, int memory, int last_in_step);

/* The same, returning at once; done(user, status, message) runs on the
 * client's progress thread when it ends (data must stay valid until then). */
typedef void (*gradex_done_fn)(void* user, int status, const char* message);
int gradex_allreduce_async(gradex_client* c, const uint64_t* span_keys, const size_t* span_elements,
                           size_t spans, float* data, size_t n, int memory, int last_in_step,
                           gradex_done_fn done, void* user);

/* Waits (up to the timeout) until every queued bucket has ended. */
int gradex_flush(gradex_client* c);

/* Residuals and step for checkpoints. *out is malloc'ed: free it with
 * gradex_free. */
int gradex_save_state(gradex_client* c, char** out, size_t* len);
int gradex_load_state(gradex_client* c, const char* state, size_t len);
void gradex_free(void* p);

int gradex_rank(const gradex_client* c);       /* -1 before the first exchange */
int gradex_world_size(const gradex_client* c); /* members of the current epoch */
uint64_t gradex_step(const gradex_client* c);  /* the next training step */

/* Leaves the job (queued buckets fail with GRADEX_CANCELLED); idempotent. */
int gradex_close(gradex_client* c);
/* Closes if needed and frees the handle (NULL is fine). */
void gradex_destroy(gradex_client* c);

/* Asynchronous parameter-server training (DGS; ps_worker.h):
 * a worker pushes the top R% per layer of its SAMomentum accumulator and
 * applies the sparse model difference the server shards return; density 1
 * is plain ASGD. Without a coordinator, rank 0 embeds one and hosts the
 * server shard in its process. */
typedef struct gradex_ps_worker gradex_ps_worker;

typedef struct {
  uint32_t epoch;
  int32_t worker;
  uint64_t steps, failed_steps, version, staleness, max_staleness_seen;
  uint64_t sent_bytes, recv_bytes, last_sent_bytes, last_recv_bytes;
  uint64_t pushed_entries, pulled_entries, full_syncs, epochs_entered;
} gradex_ps_stats_t;

/* layer_sizes: the model's parameters' sizes in order (layers entries).
 * Options as gradex_create's (job, rank, world_size, coordinator, token,
 * timeout_ms, data_ip, metrics_port, ...) plus density, momentum,
 * weight_decay, lr0, max_staleness (0: unbounded), server_shards,
 * snapshot_dir, snapshot_interval_ms. */
int gradex_ps_create(const uint32_t* layer_sizes, size_t layers, const char* const* keys,
                     const char* const* values, size_t count, int use_env,
                     const gradex_rendezvous* rendezvous, gradex_ps_worker** out);
/* One push-pull: grad and params hold n floats (the model's total);
 * params are updated in place. Blocking, bounded by the timeout. */
int gradex_ps_step(gradex_ps_worker* w, const float* grad, float* params, size_t n, float lr);
int gradex_ps_stats(const gradex_ps_worker* w, gradex_ps_stats_t* out);
/* Leaves the job; idempotent. */
int gradex_ps_close(gradex_ps_worker* w);
/* Closes if needed and frees the handle (NULL is fine). */
void gradex_ps_destroy(gradex_ps_worker* w);

#ifdef __cplusplus
}
#endif

#endif /* GRADEX_SERVICES_CLIENT_GRADEX_H_ */
