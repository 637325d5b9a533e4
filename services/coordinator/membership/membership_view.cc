#include "services/coordinator/membership/membership_view.h"

#include <algorithm>
#include <map>

#include "prometheus/family.h"
#include "prometheus/gauge.h"

namespace gradex::coordinator::membership {
namespace {

std::map<std::string, std::string> Labels(const MemberRow& r) {
  std::map<std::string, std::string> l = {
      {"rank", std::to_string(r.rank)}, {"host", r.host}, {"role", r.server ? "server" : "worker"}};
  if (r.slot >= 0) l["slot"] = std::to_string(r.slot);
  if (r.shard >= 0) {
    l["shard"] = std::to_string(r.shard);
    l["first"] = std::to_string(r.first);
    l["last"] = std::to_string(r.last);
  }
  return l;
}

}  // namespace

std::vector<MemberRow> MembershipRows(const Epoch& e, const Membership& m,
                                      const controllers::ShardAssignment& ps,
                                      const std::vector<uint32_t>& layer_sizes) {
  const std::vector<controllers::ShardRange> ranges =
      controllers::ShardRanges(layer_sizes, ps.shards);
  std::vector<MemberRow> rows;
  for (size_t rank = 0; rank < e.roster.size(); ++rank) {
    const MemberRecord* rec = m.Find(e.roster[rank]);
    MemberRow row;
    row.member_id = e.roster[rank];
    row.rank = static_cast<int>(rank);
    row.host = rec ? rec->host : "";
    row.server = rec != nullptr && rec->server;
    if (!row.server) {
      if (rank < ps.slot_of_rank.size()) row.slot = ps.slot_of_rank[rank];
      rows.push_back(row);
      continue;
    }
    bool holds = false;
    for (uint32_t s = 0; s < ps.shards && s < ps.rank_of_shard.size(); ++s) {
      if (ps.rank_of_shard[s] != static_cast<int>(rank)) continue;
      MemberRow held = row;
      held.shard = s;
      held.first = ranges[s].first;
      held.last = ranges[s].last;
      rows.push_back(held);
      holds = true;
    }
    if (!holds) rows.push_back(row);  // a standby server (more servers than shards)
  }
  return rows;
}

void MembershipView::Update(const Membership& m, const controllers::ShardAssignment& ps,
                            const PsSettings& settings) {
  const uint64_t epoch = m.has_epoch() ? m.latest().number : 0;
  if (epoch != epoch_) {
    epoch_ = epoch;
    Show(epoch == 0 ? std::vector<MemberRow>{}
                    : MembershipRows(m.latest(), m, ps, settings.layer_sizes));
    return;
  }
  // The same epoch: drop the rows of members that left or were evicted.
  std::vector<MemberRow> kept;
  for (const MemberRow& r : rows_) {
    if (m.Find(r.member_id) != nullptr) kept.push_back(r);
  }
  if (kept.size() != rows_.size()) Show(std::move(kept));
}

void MembershipView::Show(std::vector<MemberRow> rows) {
  unlisted_count_ = rows.size() > kMaxMemberInfoSeries ? rows.size() - kMaxMemberInfoSeries : 0;
  rows.resize(std::min(rows.size(), kMaxMemberInfoSeries));
  // Only the series that changed are removed and added, so that a scrape in
  // between never misses a member that stays.
  for (const MemberRow& old : rows_) {
    if (std::find(rows.begin(), rows.end(), old) == rows.end()) Remove(old);
  }
  rows_ = std::move(rows);
  Export();
}

void MembershipView::Remove(const MemberRow& row) {
  if (info_ != nullptr) info_->Remove(&info_->Add(Labels(row)));
}

void MembershipView::Export() {
  if (unlisted_ != nullptr) unlisted_->Set(static_cast<double>(unlisted_count_));
  if (info_ == nullptr) return;
  for (const MemberRow& r : rows_) info_->Add(Labels(r)).Set(1);
}

}  // namespace gradex::coordinator::membership
