// The coordinator's membership view for operators (docs/metrics.md,
// "Coordinator"): one `gradex_coordinator_member_info`
// series per member of the latest epoch, with its rank, host and role, a
// worker's slot (its id at the servers) and, for a parameter-server job's
// SERVER member, one series per shard it holds with the shard's parameter
// range [first, last). Every label value comes from what the coordinator
// already validated (host: printable, at most 255 bytes) or computed; the
// series are capped at kMaxMemberInfoSeries (the rest are counted in
// `gradex_coordinator_members_unlisted`). A new epoch replaces the view; a
// member that leaves or is evicted is removed from it at once, before the
// next epoch forms.
#ifndef GRADEX_SERVICES_COORDINATOR_MEMBERSHIP_MEMBERSHIP_VIEW_H_
#define GRADEX_SERVICES_COORDINATOR_MEMBERSHIP_MEMBERSHIP_VIEW_H_

#include <cstdint>
#include <string>
#include <vector>

#include "services/coordinator/controllers/server_shards.h"
#include "services/coordinator/job_config.h"
#include "services/coordinator/membership/membership.h"

namespace prometheus {
class Gauge;
template <typename T>
class Family;
}  // namespace prometheus

namespace gradex::coordinator::membership {

inline constexpr size_t kMaxMemberInfoSeries = 512;

// One row of the view (one series).
struct MemberRow {
  uint64_t member_id = 0;
  int rank = 0;
  std::string host;
  bool server = false;
  int slot = -1;                 // a worker's id at the servers (-1: none, e.g. a collective job)
  int64_t shard = -1;            // a server's shard (-1: none held)
  uint64_t first = 0, last = 0;  // the shard's parameter range [first, last)

  bool operator==(const MemberRow&) const = default;
};

// The rows of epoch `e` in rank order: a worker's row, or a server's row per
// shard it holds (one without a shard when it holds none). `ps` is the
// epoch's assignment (shards == 0: none), `layer_sizes` the job's model.
std::vector<MemberRow> MembershipRows(const Epoch& e, const Membership& m,
                                      const controllers::ShardAssignment& ps,
                                      const std::vector<uint32_t>& layer_sizes);

class MembershipView {
 public:
  // Null families: the view is kept (rows()) but exported nowhere.
  MembershipView(prometheus::Family<prometheus::Gauge>* info, prometheus::Gauge* unlisted)
      : info_(info), unlisted_(unlisted) {}

  // Called after every change of the membership: rebuilds the view when the
  // latest epoch changed (or is gone: everyone left), else drops the rows of
  // members no longer known.
  void Update(const Membership& m, const controllers::ShardAssignment& ps,
              const PsSettings& settings);

  // The rows exported (at most kMaxMemberInfoSeries), and those left out.
  const std::vector<MemberRow>& rows() const { return rows_; }
  size_t unlisted() const { return unlisted_count_; }

 private:
  void Show(std::vector<MemberRow> rows);
  void Remove(const MemberRow& row);
  void Export();

  prometheus::Family<prometheus::Gauge>* info_;
  prometheus::Gauge* unlisted_;
  uint64_t epoch_ = 0;  // the epoch shown (0: none)
  std::vector<MemberRow> rows_;
  size_t unlisted_count_ = 0;
};

}  // namespace gradex::coordinator::membership

#endif  // GRADEX_SERVICES_COORDINATOR_MEMBERSHIP_MEMBERSHIP_VIEW_H_
