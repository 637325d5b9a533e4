#include "services/coordinator/plan_builder.h"

#include <algorithm>
#include <string>
#include <vector>

#include "catalog/bucket_algorithms.h"
#include "catalog/catalog.h"

namespace gradex::coordinator {

catalog::NodeLayout EpochLayout(const membership::Membership& m, const membership::Epoch& epoch) {
  std::vector<std::string> nodes;
  for (uint64_t id : epoch.roster) {
    if (const membership::MemberRecord* r = m.Find(id)) nodes.push_back(r->host);
  }
  return catalog::LayoutOf(nodes);
}

gradex::v1::Plan BuildPlan(
    const JobSettings& s, const membership::Membership& m, const membership::Epoch& epoch,
    uint64_t version, uint64_t effective_step, const AgreedParams& agreed,
    const std::vector<std::pair<std::pair<uint32_t, int>, uint64_t>>& kprime) {
  gradex::v1::Plan p;
  p.set_version(version);
  p.set_epoch(epoch.number);
  p.set_effective_step(effective_step);
  p.set_job_id(s.job_id);
  int rank = 0;
  for (uint64_t id : epoch.roster) {
    const membership::MemberRecord* r = m.Find(id);
    if (r == nullptr) continue;  // Tick forms a new epoch before this can happen
    gradex::v1::Member* out = p.add_members();
    out->set_member_id(id);
    out->set_rank(rank++);
    out->set_host(r->host);
    out->set_local_rank(r->local_rank);
    out->set_device(r->device);
    out->set_ucx_address(r->ucx_address);
    out->set_agent_id(r->agent_id);
    out->set_role(r->server ? gradex::v1::ROLE_SERVER : gradex::v1::ROLE_WORKER);
  }
  const catalog::NodeLayout layout = EpochLayout(m, epoch);
  gradex::v1::NodeLayout* nl = p.mutable_layout();
  nl->set_nodes(static_cast<uint32_t>(layout.nodes()));
  nl->set_ranks_per_node(static_cast<uint32_t>(layout.ranks_per_node()));
  nl->set_flat_reason(catalog::FlatReason(layout));
  if (s.ps.enabled && agreed.ps.shards > 0) {
    gradex::v1::PsPlan* ps = p.mutable_ps();
    ps->set_shards(agreed.ps.shards);
    for (uint32_t i = 0; i < agreed.ps.shards; ++i) {
      gradex::v1::PsShard* a = ps->add_assignments();
      a->set_shard(i);
      a->set_rank(agreed.ps.rank_of_shard[i]);
    }
    ps->mutable_layer_sizes()->Add(s.ps.layer_sizes.begin(), s.ps.layer_sizes.end());
    ps->mutable_worker_slot()->Add(agreed.ps.slot_of_rank.begin(), agreed.ps.slot_of_rank.end());
    ps->set_worker_slots(static_cast<uint32_t>(s.ps.max_workers));
    ps->set_max_staleness(s.ps.max_staleness);
    ps->set_snapshot_interval_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(s.ps.snapshot_interval)));
  }
  p.set_algorithm(agreed.teams.algorithm);
  p.set_density(s.density);
  p.set_teams(agreed.teams.teams);
  for (const auto& [key, value] : kprime) {
    gradex::v1::KPrime* k = p.add_kprime();
    k->set_bucket(key.first);
    k->set_team_position(key.second);
    k->set_kprime(value);
  }
  // Only the parameters of the algorithms in play (the plan's and the
  // buckets'): the team choice may publish R-SAG for a B-SAG job (or back),
  // and agents refuse a name no algorithm in play has.
  p.mutable_bucket_algorithms()->Add(agreed.bucket_algorithms.begin(),
                                     agreed.bucket_algorithms.end());
  const std::vector<const catalog::AlgorithmSpec*> in_play =
      catalog::AlgorithmsInPlay(agreed.teams.algorithm, agreed.bucket_algorithms);
  for (const catalog::AlgorithmSpec* spec : in_play) {
    for (const auto& [name, value] : s.params) {
      if (catalog::FindParam(*spec, name) != nullptr) (*p.mutable_params())[name] = value;
    }
    // COVAP's interval from the CCR profiler, unless the job pins it.
    if (const catalog::ParamSpec* ci = catalog::FindParam(*spec, kCovapInterval);
        ci != nullptr && s.params.count(kCovapInterval) == 0) {
      const double v = ci->allowed.empty() ? std::clamp(static_cast<double>(agreed.covap_interval),
                                                        ci->min, ci->max)
                                           : agreed.covap_interval;
      if (catalog::CheckParam(*ci, v).ok()) (*p.mutable_params())[kCovapInterval] = v;
    }
  }
  for (const auto& [bucket, r] : agreed.regions) {
    if (static_cast<int>(r.boundaries.size()) != rank + 1) continue;  // another epoch's P
    gradex::v1::OkTopkRegions* o = p.add_oktopk_regions();
    o->set_bucket(bucket);
    o->set_elements(r.elements);
    o->set_from_step(r.from_step);
    o->mutable_boundaries()->Add(r.boundaries.begin(), r.boundaries.end());
  }
  p.set_covap_interval(std::max(agreed.covap_interval, 1));
  p.set_covap_ccr(agreed.covap_ccr);
  p.set_barrier_period(s.barrier_period);
  p.set_step_deadline_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(s.step_deadline)));
  p.set_entry_timeout_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(s.entry_timeout)));
  return p;
}

}  // namespace gradex::coordinator
