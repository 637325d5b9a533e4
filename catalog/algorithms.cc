// One entry per algorithm the agents run (docs/design.md's names). Ids are stable
// wire values (data-plane frames carry them): never renumber, never reuse.
// An algorithm is listed here only once its schedule exists (collectives/),
// so that a job config naming it is refused by the coordinator rather than by
// every agent. dgs (15) is a parameter-server exchange, not an allreduce
// (Traits::parameter_server; ps/dgs_*.h).
#include "catalog/builtin.h"
#include "catalog/cost_rows.h"

namespace gradex::catalog {
namespace {

ParamSpec Teams(bool power_of_two) {
  return {.name = "teams",
          .type = ParamType::kInt,
          .default_value = 1,
          .min = 1,
          .max = 65536,
          .description = power_of_two ? "SAG team count; a power of two dividing P"
                                      : "SAG team count; divides P"};
}

// The SparDL family's balanced blocks (collectives/algorithms/spardl_balance.h).
ParamSpec SpardlBalance() {
  return {.name = "spardl_balance_tau",
          .type = ParamType::kInt,
          .default_value = 64,
          .min = 0,
          .max = 1 << 20,
          .description =
              "training steps between re-balancings of the block boundaries "
              "from the result (0 = the paper's equal blocks)"};
}

// Whether Spar-Reduce-Scatter's re-selections see a rank's whole
// accumulation (collectives/algorithms/sparse_steps.h, SrsLocalKeeps).
ParamSpec SpardlFullReselect() {
  return {.name = "spardl_full_reselect",
          .type = ParamType::kInt,
          .default_value = 0,
          .allowed = {0, 1},
          .description =
              "1: each Spar-Reduce-Scatter re-selection cuts the top of the rank's whole "
              "gradient + residual plus what it received, at the same traffic; 0: the paper's "
              "local top-k per block"};
}

// Where SparDL keeps what its re-selections cut at an index the result does
// not deliver (collectives/residual_ledger.h, SendHomeUndelivered).
ParamSpec SpardlResidualHome() {
  return {.name = "spardl_residual_home",
          .type = ParamType::kInt,
          .default_value = 1,
          .allowed = {0, 1},
          .description =
              "1: a cut sum the result does not deliver goes back to its contributors' residuals "
              "(each keeps its own part; a sum that cancels is delivered as 0); 0: the paper's "
              "global residual collection (the rank that cut it keeps it all)"};
}

ParamSpec QuantizeBits() {
  return {.name = "quantize_bits",
          .type = ParamType::kInt,
          .default_value = 0,
          .allowed = {0, 2, 4, 8},
          .description = "QSGD bits per value on the dense phases (0 = off)"};
}

// Memory models (the simulator's, catalog.h): the SparDL family and gtopk
// gather a few k per rank, whatever P.
constexpr MemoryModel kLocalGather{.gather_k = 4, .gather_pk = 0};
// Measured per-rank costs that grow with P whatever N (peak RSS at P = 1024,
// N = 1024): the split reduce-scatters 1.76 GB (1800 bytes per rank).
constexpr double kSplitPerWorldBytes = 1800;

}  // namespace

// SparDL with B-SAG teams: gradex's own algorithm (docs/design.md).
std::string_view DefaultAlgorithm() { return "spardl-bsag"; }

// Its sum is exact on integers and it takes no options.
std::string_view ReferenceSumAlgorithm() { return "dense-ring"; }

// DGS's server and worker (ps/) are the only parameter-server services.
std::string_view ParameterServerAlgorithm() { return "dgs"; }

std::vector<AlgorithmSpec> BuiltinAlgorithms() {
  return {
      {.id = 1,
       .name = "dense-ring",
       .description = "dense baseline: ring reduce-scatter then ring all-gather",
       .traits = {.dense = true},
       .table1_cost = DenseRingRow,
       // Measured peak RSS at P = 1024, N = 1024: 3.0 GB per rank (0.76 GB
       // at P = 512); the 4 GiB sweep's row peaked at 4.5 GB.
       .memory = {.per_world_bytes = 3072}},
      {.id = 2,
       .name = "dense-rabenseifner",
       .description = "dense baseline: recursive halving then doubling (Rabenseifner)",
       .traits = {.dense = true},
       .table1_cost = DenseRabenseifnerRow},
      {.id = 3,
       .name = "topka",
       .description = "local top-k, all-gather of every selection, local sum",
       .traits = {},
       .table1_cost = AllGatherTopkRow},
      {.id = 4,
       .name = "topkdsa",
       .description = "SparCML dynamic sparse reduce-scatter, per-slice all-gather",
       .traits = {.volume_slack = 0.0},
       .params = {QuantizeBits()},
       .table1_cost = DynamicSparseSplitRow,
       .memory = {.dense_result = true, .per_world_bytes = kSplitPerWorldBytes}},
      {.id = 5,
       .name = "gtopk",
       .description = "global top-k by a binomial reduction tree (Shi et al. 2019)",
       .traits = {},
       .table1_cost = GlobalTopkTreeRow,
       .memory = kLocalGather},
      {.id = 6,
       .name = "gaussiank",
       .description = "topka's exchange with a Gaussian-fit threshold selection",
       .traits = {.volume_slack = 0.625},
       .table1_cost = GaussianThresholdRow,
       // Its threshold may pass up to 2k per rank.
       .memory = {.gather_pk = 2}},
      {.id = 7,
       .name = "oktopk",
       .description = "Ok-Topk: balanced split-and-reduce, global top-k, all-gatherv",
       // Slack: the model prices every entry as COO; small control frames
       // (word halves) and pieces over half full go dense, at 4 bytes.
       .traits = {.volume_slack = 0.10, .coordinated_regions = true},
       .params = {{.name = "oktopk_tau",
                   .type = ParamType::kInt,
                   .default_value = 64,
                   .min = 1,
                   .max = 1 << 20,
                   .description = "training steps between region boundary re-agreements"},
                  {.name = "oktopk_tau_prime",
                   .type = ParamType::kInt,
                   .default_value = 32,
                   .min = 1,
                   .max = 1 << 20,
                   .description = "training steps between exact threshold computations"}},
       .table1_cost = OkTopkRow,
       // The boundary agreement all-gathers every rank's P-1 proposed
       // boundaries (4-byte words), received and forwarded, whatever N (9.4 GB
       // peak at P = 1024, N = 97,656).
       .memory = {.gather_k = 4, .gather_pk = 0, .per_world_pair_bytes = 8}},
      {.id = 8,
       .name = "sparcml-ssar-rd",
       .description = "SparCML static sparse allreduce by recursive doubling",
       .traits = {.volume_slack = 0.0},
       .table1_cost = SsarRecursiveDoublingRow},
      {.id = 9,
       .name = "sparcml-ssar-split",
       .description = "SparCML static sparse allreduce, split all-gather",
       .traits = {.volume_slack = 0.0},
       .params = {QuantizeBits()},
       .table1_cost = SsarSplitRow,
       .memory = {.per_world_bytes = kSplitPerWorldBytes}},
      {.id = 10,
       .name = "sparcml-dsar-split",
       .description = "SparCML dynamic sparse allreduce, dense split all-gather",
       .traits = {.volume_slack = 0.0},
       .params = {QuantizeBits()},
       .table1_cost = DsarSplitRow,
       .memory = {.dense_result = true, .per_world_bytes = kSplitPerWorldBytes}},
      {.id = 11,
       .name = "spardl",
       .description = "SparDL: Spar-Reduce-Scatter, Bruck all-gather, global residuals",
       .traits = {},
       .params = {SpardlBalance(), SpardlFullReselect(), SpardlResidualHome()},
       .table1_cost = SparDLRow,
       .memory = kLocalGather},
      {.id = 12,
       .name = "spardl-rsag",
       .description = "SparDL in teams synchronised by recursive doubling (R-SAG)",
       .traits = {.uses_teams = true, .teams_power_of_two = true},
       .params = {Teams(true), SpardlBalance(), SpardlFullReselect(), SpardlResidualHome()},
       .table1_cost = RsagRow,
       .memory = kLocalGather},
      {.id = 13,
       .name = "spardl-bsag",
       .description = "SparDL in teams synchronised by Bruck with a k' pre-selection (B-SAG)",
       .traits = {.uses_teams = true, .exact_on_integers = false, .kprime_controlled = true},
       .params = {Teams(false),
                  SpardlBalance(),
                  SpardlFullReselect(),
                  SpardlResidualHome(),
                  {.name = "kprime",
                   .type = ParamType::kInt,
                   .default_value = 0,
                   .min = 0,
                   .max = 4294967295.0,
                   .description = "per-block pre-selection count (0 = the k' controller)"}},
       .table1_cost = BsagRow,
       .memory = kLocalGather},
      {.id = 14,
       .name = "covap",
       .description = "COVAP: whole bucket parts in turn by dense allreduce, decaying residuals",
       // Dense frames of the sent part: the ring's model is exact. Exact on
       // integers while the error-feedback coefficient is dyadic (0.5 below
       // step 50, 1 from step 250): 0.6..0.9 round like any float scaling.
       .traits = {.dense_params = {{"covap_interval", 1}},
                  .volume_slack = 0.0,
                  .ccr_profiled = true},
       .params = {{.name = "covap_interval",
                   .type = ParamType::kInt,
                   .default_value = 3,
                   .min = 1,
                   .max = 1024,
                   .description = "COVAP's interval I: each part is sent every I steps "
                                  "(the coordinator's CCR profiler publishes ceil(CCR))"}},
       .table1_cost = CovapRow,
       // A dense result of the bucket when it is sent whole.
       .memory = {.dense_result = true, .gather_pk = 0}},
      {.id = 15,
       .name = "dgs",
       .description = "DGS: asynchronous parameter server, top-R% pushes (SAMomentum) and "
                      "top-R% pulls of M - v_k (R = the job's density scaled by lr/lr0; "
                      "density 1 = ASGD)",
       // Asynchronous: no step is shared by all ranks. At density 1 it is
       // ASGD, not a dense allreduce. The server's sums are exact on
       // integers; the worker's SAMomentum divides unsent entries by the
       // momentum (exact at dyadic momenta).
       .traits = {.equals_dense_at_density_one = false,
                  .synchronous = false,
                  .parameter_server = true},
       .params = {{.name = "momentum",
                   .type = ParamType::kDouble,
                   .default_value = 0.9,
                   .min = 1e-6,
                   .max = 1,
                   .description = "SAMomentum's m (unsent entries are divided by it)"},
                  {.name = "weight_decay",
                   .type = ParamType::kDouble,
                   .default_value = 5e-4,
                   .min = 0,
                   .max = 1,
                   .description = "weight decay added to the gradient before the momentum"},
                  {.name = "full_sync_every",
                   .type = ParamType::kInt,
                   .default_value = 150,
                   .min = 1,
                   .max = 1 << 30,
                   .description = "server versions between a worker's full model syncs"},
                  {.name = "max_staleness",
                   .type = ParamType::kInt,
                   .default_value = 0,
                   .min = 0,
                   .max = 1 << 30,
                   .description = "versions a worker may fall behind before faster ones wait "
                                  "(0 = unbounded; else at least workers - 1)"}}},
  };
}

}  // namespace gradex::catalog
