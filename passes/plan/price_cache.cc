#include "passes/plan/price_cache.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <ostream>
#include <unordered_map>
#include <utility>
#include <vector>

#include "flatbuffers/flatbuffers.h"
#include "formats/price_cache_generated.h"

namespace tilec::plan {
namespace {

// A field added to either struct must be saved too (price_cache.fbs and the
// functions below): these sizes stop the build until it is.
static_assert(sizeof(passes::TransferCost) == 128,
              "passes::TransferCost changed: save the new field in the price "
              "cache (formats/price_cache.fbs, passes/plan/price_cache.cc)");
static_assert(sizeof(OpCost) == 136,
              "plan::OpCost changed: save the new field in the price cache "
              "(formats/price_cache.fbs, passes/plan/price_cache.cc)");

using Builder = flatbuffers::FlatBufferBuilder;
using PerTile = std::shared_ptr<const std::vector<int64_t>>;
template <typename T>
using Offsets = flatbuffers::Vector<flatbuffers::Offset<T>>;

// A per-tile list as runs of equal values.
struct Runs {
  std::vector<int64_t> values;
  std::vector<uint32_t> counts;

  explicit Runs(const std::vector<int64_t>& tiles) {
    for (int64_t v : tiles) {
      if (!values.empty() && values.back() == v) {
        ++counts.back();
      } else {
        values.push_back(v);
        counts.push_back(1);
      }
    }
  }
  std::string Key() const {
    std::string key(reinterpret_cast<const char*>(values.data()),
                    values.size() * sizeof(int64_t));
    key.append(reinterpret_cast<const char*>(counts.data()),
               counts.size() * sizeof(uint32_t));
    return key;
  }
};

// The keys of `table`, sorted, each with its price.
template <typename Value>
std::vector<std::pair<const std::string*, const Value*>> Sorted(
    const PriceTable<Value>& table) {
  std::vector<std::pair<const std::string*, const Value*>> entries;
  table.ForEach([&](const std::string& key, const Value& value) {
    entries.push_back({&key, &value});
  });
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return *a.first < *b.first; });
  return entries;
}

// Writes a Coster family's caches: every table sorted by key, and each
// distinct per-tile list once, in the order the tables first name it.
class Writer {
 public:
  flatbuffers::Offset<fb::SavedPriceTables> Tables(const Coster::Cache& c) {
    const auto transfers = Table(c.transfers, &Writer::Transfer);
    const auto redistributions = Table(c.redistributions, &Writer::Transfer);
    const auto placements = Table(c.placements, &Writer::Flag);
    const auto bytes = Table(c.bytes, &Writer::Bytes);
    const auto shape_prices = Table(c.shape_prices, &Writer::Op);
    const auto phases = Table(c.phases, &Writer::Transfer);
    return fb::CreateSavedPriceTables(b_, transfers, redistributions,
                                      placements, bytes, shape_prices, phases);
  }

  // The whole cache, after Tables for the exact and the bound prices.
  std::string Finish(flatbuffers::Offset<fb::SavedPriceTables> scheduled,
                     flatbuffers::Offset<fb::SavedPriceTables> bounds,
                     const std::string& target, int gemm_dtype) {
    std::vector<flatbuffers::Offset<fb::TileRuns>> lists;
    for (const Runs& runs : lists_) lists.push_back(List(runs));
    const auto list_vector = b_.CreateVector(lists);
    const auto fingerprint = b_.CreateString(kPriceFingerprint);
    const auto target_bytes = b_.CreateVector(
        reinterpret_cast<const uint8_t*>(target.data()), target.size());
    b_.Finish(fb::CreatePriceCache(b_, fingerprint, target_bytes, gemm_dtype,
                                   scheduled, bounds, list_vector),
              fb::PriceCacheIdentifier());
    return std::string(reinterpret_cast<const char*>(b_.GetBufferPointer()),
                       b_.GetSize());
  }

 private:
  template <typename Value, typename Saved>
  flatbuffers::Offset<Offsets<Saved>> Table(
      const PriceTable<Value>& table,
      flatbuffers::Offset<Saved> (Writer::*save)(const std::string&,
                                                 const Value&)) {
    std::vector<flatbuffers::Offset<Saved>> saved;
    for (const auto& [key, value] : Sorted(table)) {
      saved.push_back((this->*save)(*key, *value));
    }
    return b_.CreateVector(saved);
  }

  // Its index in the lists, -1 for none.
  int32_t ListIndex(const PerTile& tiles) {
    if (!tiles) return -1;
    auto known = by_address_.find(tiles.get());
    if (known != by_address_.end()) return known->second;
    Runs runs(*tiles);
    auto [it, added] = by_content_.try_emplace(
        runs.Key(), static_cast<int32_t>(lists_.size()));
    if (added) lists_.push_back(std::move(runs));
    by_address_[tiles.get()] = it->second;
    return it->second;
  }

  // In 32 bits where every value fits (bytes per tile always do).
  flatbuffers::Offset<fb::TileRuns> List(const Runs& runs) {
    const bool narrow =
        std::all_of(runs.values.begin(), runs.values.end(),
                    [](int64_t v) { return v == static_cast<int32_t>(v); });
    flatbuffers::Offset<flatbuffers::Vector<int32_t>> values = 0;
    flatbuffers::Offset<flatbuffers::Vector<int64_t>> wide = 0;
    if (narrow) {
      values = b_.CreateVector<int32_t>(runs.values.size(), [&](size_t i) {
        return static_cast<int32_t>(runs.values[i]);
      });
    } else {
      wide = b_.CreateVector(runs.values);
    }
    return fb::CreateTileRuns(b_, values, wide, b_.CreateVector(runs.counts));
  }

  flatbuffers::Offset<fb::SavedTransfer> Transfer(
      const std::string& key, const passes::TransferCost& t) {
    const auto k = b_.CreateString(key);
    fb::SavedTransferBuilder s(b_);
    s.add_key(k);
    s.add_phase_cycles(t.phase_cycles);
    s.add_unicast(t.unicast);
    s.add_scheduled_cycles(t.scheduled_cycles);
    s.add_bound_cycles(t.bound_cycles);
    s.add_tile_code(ListIndex(t.tile_code));
    s.add_code_bytes(t.code_bytes);
    s.add_local_copy_cycles(t.local_copy_cycles);
    s.add_transfers(t.transfers);
    s.add_bytes_sent(t.bytes_sent);
    s.add_bytes_received(t.bytes_received);
    s.add_local_copy_bytes(t.local_copy_bytes);
    s.add_max_bytes_sent(t.max_bytes_sent);
    s.add_max_bytes_received(t.max_bytes_received);
    s.add_max_fragments(t.max_fragments);
    s.add_exchange_bottleneck_tile(t.exchange_bottleneck_tile);
    s.add_copy_bottleneck_tile(t.copy_bottleneck_tile);
    return s.Finish();
  }

  flatbuffers::Offset<fb::SavedOpCost> Op(const std::string& key,
                                          const OpCost& c) {
    const auto k = b_.CreateString(key);
    const auto scratch_text = b_.CreateString(c.scratch_text);
    const auto detail = b_.CreateString(c.detail);
    fb::SavedOpCostBuilder s(b_);
    s.add_key(k);
    s.add_compute(c.compute);
    s.add_exchange(c.exchange);
    s.add_phases(c.phases);
    s.add_exchange_bytes(c.exchange_bytes);
    s.add_code(ListIndex(c.code));
    s.add_scratch(ListIndex(c.scratch));
    s.add_max_scratch(c.max_scratch);
    s.add_scratch_text(scratch_text);
    s.add_detail(detail);
    return s.Finish();
  }

  flatbuffers::Offset<fb::SavedTileBytes> Bytes(const std::string& key,
                                                const TileBytes& bytes) {
    const auto k = b_.CreateString(key);
    return fb::CreateSavedTileBytes(b_, k, ListIndex(bytes));
  }

  flatbuffers::Offset<fb::SavedFlag> Flag(const std::string& key,
                                          const bool& value) {
    return fb::CreateSavedFlag(b_, b_.CreateString(key), value);
  }

  Builder b_;
  std::vector<Runs> lists_;
  std::unordered_map<std::string, int32_t> by_content_;
  std::unordered_map<const std::vector<int64_t>*, int32_t> by_address_;
};

// Reads saved prices back; each per-tile list is made once and shared by
// the prices that name it.
class Reader {
 public:
  // The lists of `saved`, each of exactly `tiles` tiles, or why not.
  std::optional<std::string> Lists(const fb::PriceCache& saved, int tiles) {
    if (saved.lists() == nullptr) return std::nullopt;
    for (const fb::TileRuns* runs : *saved.lists()) {
      auto bad = List(*runs, tiles);
      if (bad) return bad;
    }
    return std::nullopt;
  }

  std::optional<std::string> Transfer(const fb::SavedTransfer& s,
                                      passes::TransferCost* t) const {
    t->phase_cycles = s.phase_cycles();
    t->unicast = s.unicast();
    t->scheduled_cycles = s.scheduled_cycles();
    t->bound_cycles = s.bound_cycles();
    t->code_bytes = s.code_bytes();
    t->local_copy_cycles = s.local_copy_cycles();
    t->transfers = s.transfers();
    t->bytes_sent = s.bytes_sent();
    t->bytes_received = s.bytes_received();
    t->local_copy_bytes = s.local_copy_bytes();
    t->max_bytes_sent = s.max_bytes_sent();
    t->max_bytes_received = s.max_bytes_received();
    t->max_fragments = s.max_fragments();
    t->exchange_bottleneck_tile = s.exchange_bottleneck_tile();
    t->copy_bottleneck_tile = s.copy_bottleneck_tile();
    return Named(s.tile_code(), &t->tile_code);
  }

  std::optional<std::string> Op(const fb::SavedOpCost& s, OpCost* c) const {
    c->compute = s.compute();
    c->exchange = s.exchange();
    c->phases = s.phases();
    c->exchange_bytes = s.exchange_bytes();
    c->max_scratch = s.max_scratch();
    c->scratch_text = s.scratch_text() ? s.scratch_text()->str() : "";
    c->detail = s.detail() ? s.detail()->str() : "";
    if (auto bad = Named(s.code(), &c->code)) return bad;
    return Named(s.scratch(), &c->scratch);
  }

  std::optional<std::string> Bytes(const fb::SavedTileBytes& s,
                                   TileBytes* b) const {
    return Named(s.bytes(), b);
  }

  std::optional<std::string> Flag(const fb::SavedFlag& s, bool* value) const {
    *value = s.value();
    return std::nullopt;
  }

 private:
  std::optional<std::string> List(const fb::TileRuns& runs, int tiles) {
    const size_t n = runs.values()        ? runs.values()->size()
                     : runs.wide_values() ? runs.wide_values()->size()
                                          : 0;
    if (!runs.runs() || runs.runs()->size() != n ||
        (runs.values() && runs.wide_values())) {
      return std::string("a per-tile list whose values and runs differ");
    }
    int64_t total = 0;
    for (uint32_t count : *runs.runs()) total += count;
    if (total != tiles) {
      return "a per-tile list of " + std::to_string(total) + " tiles, not " +
             std::to_string(tiles);
    }
    auto list = std::make_shared<std::vector<int64_t>>();
    list->reserve(static_cast<size_t>(tiles));
    for (flatbuffers::uoffset_t i = 0; i < n; ++i) {
      const int64_t v =
          runs.values() ? runs.values()->Get(i) : runs.wide_values()->Get(i);
      list->insert(list->end(), runs.runs()->Get(i), v);
    }
    lists_.push_back(std::move(list));
    return std::nullopt;
  }

  // The list at `index` (-1: none).
  std::optional<std::string> Named(int32_t index, PerTile* out) const {
    out->reset();
    if (index == -1) return std::nullopt;
    if (index < 0 || static_cast<size_t>(index) >= lists_.size()) {
      return "a price naming per-tile list " + std::to_string(index) + " of " +
             std::to_string(lists_.size());
    }
    *out = lists_[static_cast<size_t>(index)];
    return std::nullopt;
  }

  std::vector<PerTile> lists_;
};

// Every entry of `saved` read by `read` into `*out`, or why not.
template <typename Value, typename Saved>
std::optional<std::string> ReadTable(
    const Offsets<Saved>* saved, const Reader& reader,
    std::optional<std::string> (Reader::*read)(const Saved&, Value*) const,
    std::vector<std::pair<std::string, Value>>* out) {
  if (saved == nullptr) return std::nullopt;
  for (const Saved* s : *saved) {
    if (s->key() == nullptr) return std::string("a price without a key");
    Value value{};
    if (auto bad = (reader.*read)(*s, &value)) return bad;
    out->push_back({s->key()->str(), std::move(value)});
  }
  return std::nullopt;
}

// One family cache's prices as read, added to the Coster only once every
// one of them has read.
struct ReadTables {
  template <typename Value>
  using Entries = std::vector<std::pair<std::string, Value>>;
  Entries<passes::TransferCost> transfers, redistributions, phases;
  Entries<bool> placements;
  Entries<TileBytes> bytes;
  Entries<OpCost> shape_prices;

  std::optional<std::string> Read(const fb::SavedPriceTables* s,
                                  const Reader& r) {
    if (s == nullptr) return std::nullopt;
    std::optional<std::string> bad =
        ReadTable(s->transfers(), r, &Reader::Transfer, &transfers);
    if (!bad) {
      bad = ReadTable(s->redistributions(), r, &Reader::Transfer,
                      &redistributions);
    }
    if (!bad) bad = ReadTable(s->phases(), r, &Reader::Transfer, &phases);
    if (!bad) {
      bad = ReadTable(s->placements(), r, &Reader::Flag, &placements);
    }
    if (!bad) bad = ReadTable(s->bytes(), r, &Reader::Bytes, &bytes);
    if (!bad) {
      bad = ReadTable(s->shape_prices(), r, &Reader::Op, &shape_prices);
    }
    return bad;
  }

  void AddTo(Coster::Cache& cache) {
    auto add = [](auto& entries, auto& table) {
      for (auto& [key, value] : entries) table.Add(key, std::move(value));
    };
    add(transfers, cache.transfers);
    add(redistributions, cache.redistributions);
    add(phases, cache.phases);
    add(placements, cache.placements);
    add(bytes, cache.bytes);
    add(shape_prices, cache.shape_prices);
  }
};

std::string PackedTarget(const fb::TargetT& target) {
  Builder b;
  b.Finish(fb::Target::Pack(b, &target));
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()),
                     b.GetSize());
}

int GemmDTypeCode(const PriceOptions& options) {
  return options.gemm_dtype ? static_cast<int>(*options.gemm_dtype) : -1;
}

}  // namespace

std::string SavePrices(const Coster& coster) {
  Writer writer;
  const auto scheduled = writer.Tables(*coster.cache_);
  const auto bounds = writer.Tables(*coster.bound_cache_);
  return writer.Finish(scheduled, bounds, PackedTarget(coster.target()),
                       GemmDTypeCode(coster.options()));
}

std::optional<std::string> TakePrices(std::string_view bytes,
                                      const Coster& coster) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  flatbuffers::Verifier verifier(data, bytes.size());
  if (bytes.size() < 8 || !fb::PriceCacheBufferHasIdentifier(data) ||
      !fb::VerifyPriceCacheBuffer(verifier)) {
    return std::string("not a price cache (or a damaged one)");
  }
  const fb::PriceCache& saved = *fb::GetPriceCache(data);
  if (saved.fingerprint() == nullptr ||
      saved.fingerprint()->string_view() != kPriceFingerprint) {
    return std::string("saved by another build of tilec");
  }
  const std::string target = PackedTarget(coster.target());
  if (saved.target() == nullptr ||
      std::string_view(reinterpret_cast<const char*>(saved.target()->data()),
                       saved.target()->size()) != target) {
    return std::string("saved for another target");
  }
  if (saved.gemm_dtype() != GemmDTypeCode(coster.options())) {
    return std::string("saved for another --gemm_dtype");
  }
  Reader reader;
  if (auto bad = reader.Lists(saved, coster.tiles())) return bad;
  ReadTables scheduled, bounds;
  if (auto bad = scheduled.Read(saved.scheduled(), reader)) return bad;
  if (auto bad = bounds.Read(saved.bounds(), reader)) return bad;
  scheduled.AddTo(*coster.cache_);
  bounds.AddTo(*coster.bound_cache_);
  return std::nullopt;
}

void TakeSavedPrices(std::string_view pass, const passes::PassOptions& common,
                     const Coster& coster) {
  if (common.saved_prices.empty()) return;
  const std::optional<std::string> refused =
      TakePrices(common.saved_prices, coster);
  if (refused && common.messages != nullptr) {
    *common.messages << pass << ": price cache " << common.price_cache_name
                     << " not taken (" << *refused
                     << "): every price is made afresh\n";
  }
}

Status SavePassPrices(const passes::PassOptions& common, const Coster& coster) {
  if (!common.save_prices) return Status::Ok();
  return common.save_prices(SavePrices(coster));
}

}  // namespace tilec::plan
