// The catalog against the schedules: every entry has one and every schedule
// has an entry, ids are unique wire values, parameters are checked as data.
#include "catalog/catalog.h"

#include <algorithm>
#include <set>

#include "catalog/bucket_algorithms.h"
#include "catalog/fnv1a.h"
#include "catalog/median.h"
#include "catalog/models.h"
#include "collectives/sparse_allreduce.h"
#include "gtest/gtest.h"

namespace gradex {
namespace {

TEST(Catalog, EveryEntryHasAScheduleOfTheSameName) {
  const std::vector<const catalog::AlgorithmSpec*> all = catalog::All();
  ASSERT_GE(all.size(), 13u);
  // Parameter-server entries (dgs) are not allreduces: no schedule there.
  const auto servers = std::count_if(all.begin(), all.end(), [](const catalog::AlgorithmSpec* s) {
    return s->traits.parameter_server;
  });
  EXPECT_EQ(collectives::CatalogAlgorithms().size() + servers, all.size());
  std::set<uint16_t> ids;
  for (const catalog::AlgorithmSpec* spec : all) {
    SCOPED_TRACE(spec->name);
    EXPECT_NE(spec->id, 0);
    EXPECT_TRUE(ids.insert(spec->id).second);
    EXPECT_FALSE(spec->description.empty());
    if (spec->traits.parameter_server) continue;
    EXPECT_NE(spec->table1_cost, nullptr);
    auto algo = collectives::CreateAllreduce(spec->name);
    ASSERT_TRUE(algo.ok()) << algo.status();
    EXPECT_EQ((*algo)->name(), spec->name);
    EXPECT_EQ(static_cast<uint16_t>((*algo)->id()), spec->id);
    EXPECT_EQ(catalog::FindId(spec->id), spec);
  }
}

TEST(Catalog, UnknownNamesListTheKnownOnes) {
  auto algo = collectives::CreateAllreduce("no-such-algorithm");
  ASSERT_EQ(algo.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(algo.status().message().find("spardl-bsag"), std::string::npos);
  EXPECT_EQ(catalog::Find("no-such-algorithm"), nullptr);
  EXPECT_EQ(collectives::wire::CatalogId("no-such-algorithm"), collectives::wire::AlgorithmId{0});
}

// DGS is described truthfully: a parameter-server exchange (collectives/
// dgs_*.h), asynchronous, with the seed's defaults; never an allreduce, a
// bucket's algorithm, or a Table 1 row that "auto" could pick.
TEST(Catalog, DgsIsAParameterServerEntry) {
  const catalog::AlgorithmSpec* dgs = catalog::Find("dgs");
  ASSERT_NE(dgs, nullptr);
  EXPECT_EQ(dgs->id, 15);
  EXPECT_EQ(collectives::wire::CatalogId("dgs"), collectives::wire::AlgorithmId{15});
  EXPECT_TRUE(dgs->traits.parameter_server);
  EXPECT_FALSE(dgs->traits.synchronous);
  EXPECT_FALSE(dgs->traits.equals_dense_at_density_one);
  EXPECT_EQ(dgs->table1_cost, nullptr);
  EXPECT_EQ(collectives::CreateAllreduce("dgs").status().code(), absl::StatusCode::kNotFound);
  const std::vector<std::pair<std::string, double>> defaults = {
      {"momentum", 0.9}, {"weight_decay", 5e-4}, {"full_sync_every", 150}, {"max_staleness", 0}};
  for (const auto& [name, value] : defaults) {
    const catalog::ParamSpec* p = catalog::FindParam(*dgs, name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_EQ(p->default_value, value) << name;
  }
  EXPECT_FALSE(catalog::CheckParam(*catalog::FindParam(*dgs, "momentum"), 0).ok());
  EXPECT_FALSE(catalog::CheckParam(*catalog::FindParam(*dgs, "full_sync_every"), 0).ok());
  EXPECT_FALSE(catalog::CheckBucketAlgorithms({"dgs"}).ok());
  EXPECT_TRUE(catalog::CheckBucketAlgorithms({"spardl"}).ok());
}

TEST(Catalog, ClashingEntriesAreRefused) {
  catalog::AlgorithmSpec dup{.id = 1, .name = "another-name"};
  EXPECT_EQ(catalog::Register(dup).code(), absl::StatusCode::kAlreadyExists);
  catalog::AlgorithmSpec same_name{.id = 60999, .name = "dense-ring"};
  EXPECT_EQ(catalog::Register(same_name).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(catalog::Register({.id = 0, .name = "zero"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(catalog::FindId(60999), nullptr);
  // A schedule without an entry is refused too.
  EXPECT_EQ(collectives::RegisterAlgorithm(
                "no-entry", [] { return std::unique_ptr<collectives::SparseAllreduce>(); })
                .code(),
            absl::StatusCode::kNotFound);
}

TEST(Catalog, ParametersAreData) {
  const catalog::AlgorithmSpec* ok = catalog::Find("oktopk");
  ASSERT_NE(ok, nullptr);
  const catalog::ParamSpec* tau = catalog::FindParam(*ok, "oktopk_tau");
  ASSERT_NE(tau, nullptr);
  EXPECT_EQ(tau->default_value, 64);
  EXPECT_TRUE(catalog::CheckParam(*tau, 1).ok());
  EXPECT_FALSE(catalog::CheckParam(*tau, 0).ok());
  EXPECT_FALSE(catalog::CheckParam(*tau, 2.5).ok());
  const catalog::ParamSpec* bits = catalog::FindParam(*catalog::Find("topkdsa"), "quantize_bits");
  ASSERT_NE(bits, nullptr);
  EXPECT_TRUE(catalog::CheckParam(*bits, 4).ok());
  EXPECT_FALSE(catalog::CheckParam(*bits, 3).ok());
  EXPECT_EQ(catalog::FindParam(*catalog::Find("dense-ring"), "oktopk_tau"), nullptr);
}

TEST(Catalog, TraitsSayWhatTheSchedulesNeed) {
  EXPECT_TRUE(catalog::Find("dense-ring")->traits.dense);
  EXPECT_TRUE(catalog::Find("spardl-rsag")->traits.teams_power_of_two);
  EXPECT_TRUE(catalog::Find("spardl-bsag")->traits.kprime_controlled);
  EXPECT_FALSE(catalog::Find("spardl-bsag")->traits.teams_power_of_two);
  for (const catalog::AlgorithmSpec* spec : catalog::All()) {
    EXPECT_EQ(spec->traits.synchronous, !spec->traits.parameter_server) << spec->name;
  }
}

TEST(Catalog, DefaultAndReferenceAreEntries) {
  // The agents' default plan and the invariant checks' reference sum name
  // catalog entries; the reference is dense, exact on integers, option-free.
  const catalog::AlgorithmSpec* def = catalog::Find(catalog::DefaultAlgorithm());
  ASSERT_NE(def, nullptr);
  EXPECT_TRUE(collectives::CreateAllreduce(def->name).ok());
  const catalog::AlgorithmSpec* ref = catalog::Find(catalog::ReferenceSumAlgorithm());
  ASSERT_NE(ref, nullptr);
  EXPECT_TRUE(ref->traits.dense);
  EXPECT_TRUE(ref->traits.exact_on_integers);
  EXPECT_TRUE(ref->params.empty());
}

TEST(Catalog, Table1RowsAtKnownPoints) {
  // dense-ring at P=4, n=1000: 6 messages, 2·3/4·4·1000 bytes.
  catalog::CostRange c = catalog::Find("dense-ring")->table1_cost({.world = 4, .elements = 1000});
  EXPECT_EQ(c.latency_lo, 6);
  EXPECT_EQ(c.bytes_lo, 6000);
  // B-SAG's row spans k' in [k/(QT), k/Q]; a measured ratio picks one point.
  const catalog::CostFn bsag = catalog::Find("spardl-bsag")->table1_cost;
  catalog::CostRange range = bsag({.world = 8, .elements = 100000, .density = 0.01, .teams = 2});
  catalog::CostRange at_one =
      bsag({.world = 8, .elements = 100000, .density = 0.01, .teams = 2, .kprime_ratio = 1.0});
  EXPECT_LT(range.bytes_lo, range.bytes_hi);
  EXPECT_DOUBLE_EQ(at_one.bytes_lo, range.bytes_hi);
  EXPECT_EQ(catalog::CeilLog2(5), 3);
  EXPECT_EQ(catalog::FloorLog2(5), 2);
  EXPECT_EQ(catalog::KeepCount(0.01, 6250000), 62500u);
}

// The published FNV-1a 64 vectors, and the truncated basis's job id pinned:
// frames and saved states carry these bits.
TEST(Fnv1a, MatchesTheReferenceAndTheWire) {
  static_assert(catalog::Fnv1a(std::string_view()) == 0xcbf29ce484222325ull);
  EXPECT_EQ(catalog::Fnv1a("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(catalog::Fnv1a("foobar"), 0x85944171f73967e8ull);
  EXPECT_EQ(catalog::Fnv1a("bar", catalog::Fnv1a("foo")), catalog::Fnv1a("foobar"));
  const uint8_t bytes[] = {'f', 'o', 'o', 'b', 'a', 'r'};
  EXPECT_EQ(catalog::Fnv1a(bytes), catalog::Fnv1a("foobar"));
  EXPECT_EQ(catalog::Fnv1a("job-1", catalog::kFnv1aTruncatedBasis), 0x1fe51457700a1b3cull);
}

TEST(Median, MeanOfTheMiddleTwoOrTheUpperOne) {
  EXPECT_EQ(catalog::Median(std::vector<double>{3, 1, 2}), 2);
  EXPECT_EQ(catalog::Median(std::vector<double>{4, 1, 2, 3}), 2.5);
  EXPECT_EQ(catalog::Median(std::vector<double>{}), 0);
  EXPECT_EQ(catalog::UpperMedian(std::vector<double>{3, 1, 2}), 2);
  EXPECT_EQ(catalog::UpperMedian(std::vector<double>{4, 1, 2, 3}), 3);
  EXPECT_EQ(catalog::UpperMedian(std::vector<double>{}), 0);
}

TEST(Catalog, OnlyCovapIsCcrProfiled) {
  for (const catalog::AlgorithmSpec* spec : catalog::All()) {
    EXPECT_EQ(spec->traits.ccr_profiled, spec->name == "covap") << spec->name;
  }
}

}  // namespace
}  // namespace gradex
