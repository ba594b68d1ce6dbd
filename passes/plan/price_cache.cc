#include "passes/plan/price_cache.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <ostream>
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

flatbuffers::Offset<fb::TileRuns> SaveRuns(Builder& b, const PerTile& tiles) {
  if (!tiles) return 0;
  std::vector<int64_t> values;
  std::vector<uint32_t> runs;
  for (int64_t v : *tiles) {
    if (!values.empty() && values.back() == v) {
      ++runs.back();
    } else {
      values.push_back(v);
      runs.push_back(1);
    }
  }
  return fb::CreateTileRunsDirect(b, &values, &runs);
}

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

flatbuffers::Offset<fb::SavedTransfer> SaveTransfer(
    Builder& b, const std::string& key, const passes::TransferCost& t) {
  const auto k = b.CreateString(key);
  const auto code = SaveRuns(b, t.tile_code);
  fb::SavedTransferBuilder s(b);
  s.add_key(k);
  s.add_phase_cycles(t.phase_cycles);
  s.add_unicast(t.unicast);
  s.add_scheduled_cycles(t.scheduled_cycles);
  s.add_bound_cycles(t.bound_cycles);
  s.add_tile_code(code);
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

flatbuffers::Offset<fb::SavedOpCost> SaveOpCost(Builder& b,
                                                const std::string& key,
                                                const OpCost& c) {
  const auto k = b.CreateString(key);
  const auto code = SaveRuns(b, c.code);
  const auto scratch = SaveRuns(b, c.scratch);
  const auto scratch_text = b.CreateString(c.scratch_text);
  const auto detail = b.CreateString(c.detail);
  fb::SavedOpCostBuilder s(b);
  s.add_key(k);
  s.add_compute(c.compute);
  s.add_exchange(c.exchange);
  s.add_phases(c.phases);
  s.add_exchange_bytes(c.exchange_bytes);
  s.add_code(code);
  s.add_scratch(scratch);
  s.add_max_scratch(c.max_scratch);
  s.add_scratch_text(scratch_text);
  s.add_detail(detail);
  return s.Finish();
}

template <typename Value, typename Save>
auto SaveTable(Builder& b, const PriceTable<Value>& table, const Save& save) {
  std::vector<decltype(save(b, std::string(), std::declval<Value>()))> saved;
  for (const auto& [key, value] : Sorted(table)) {
    saved.push_back(save(b, *key, *value));
  }
  return b.CreateVector(saved);
}

// Reads saved prices back, refusing a per-tile list that does not name
// every tile of the target once.
class Reader {
 public:
  explicit Reader(int tiles) : tiles_(tiles) {}

  std::optional<std::string> Runs(const fb::TileRuns* runs, PerTile* out) {
    out->reset();
    if (runs == nullptr) return std::nullopt;
    if (!runs->values() || !runs->runs() ||
        runs->values()->size() != runs->runs()->size()) {
      return "a per-tile list whose values and runs differ in length";
    }
    int64_t total = 0;
    for (uint32_t n : *runs->runs()) total += n;
    if (total != tiles_) {
      return "a per-tile list of " + std::to_string(total) + " tiles, not " +
             std::to_string(tiles_);
    }
    auto tiles = std::make_shared<std::vector<int64_t>>();
    tiles->reserve(static_cast<size_t>(tiles_));
    for (flatbuffers::uoffset_t i = 0; i < runs->values()->size(); ++i) {
      tiles->insert(tiles->end(), runs->runs()->Get(i), runs->values()->Get(i));
    }
    *out = std::move(tiles);
    return std::nullopt;
  }

  std::optional<std::string> Transfer(const fb::SavedTransfer& s,
                                      passes::TransferCost* t) {
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
    return Runs(s.tile_code(), &t->tile_code);
  }

  std::optional<std::string> Op(const fb::SavedOpCost& s, OpCost* c) {
    c->compute = s.compute();
    c->exchange = s.exchange();
    c->phases = s.phases();
    c->exchange_bytes = s.exchange_bytes();
    c->max_scratch = s.max_scratch();
    c->scratch_text = s.scratch_text() ? s.scratch_text()->str() : "";
    c->detail = s.detail() ? s.detail()->str() : "";
    if (auto bad = Runs(s.code(), &c->code)) return bad;
    return Runs(s.scratch(), &c->scratch);
  }

  std::optional<std::string> Bytes(const fb::SavedTileBytes& s, PerTile* b) {
    return Runs(s.bytes(), b);
  }

  std::optional<std::string> Flag(const fb::SavedFlag& s, bool* value) {
    *value = s.value();
    return std::nullopt;
  }

 private:
  int tiles_;
};

// Every entry of `saved` read by `read` into a price; nothing is added to
// `table` unless all of them read.
template <typename Value, typename Saved, typename Read>
std::optional<std::string> ReadTable(
    const flatbuffers::Vector<flatbuffers::Offset<Saved>>* saved,
    const Read& read, std::vector<std::pair<std::string, Value>>* out) {
  if (saved == nullptr) return std::nullopt;
  for (const Saved* s : *saved) {
    if (s->key() == nullptr) return "a price without a key";
    Value value{};
    if (auto bad = read(*s, &value)) return bad;
    out->push_back({s->key()->str(), std::move(value)});
  }
  return std::nullopt;
}

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
  Builder b;
  auto tables = [&](const Coster::Cache& cache) {
    const auto transfers = SaveTable(b, cache.transfers, SaveTransfer);
    const auto redistributions =
        SaveTable(b, cache.redistributions, SaveTransfer);
    const auto placements =
        SaveTable(b, cache.placements,
                  [](Builder& b, const std::string& key, const bool& value) {
                    return fb::CreateSavedFlag(b, b.CreateString(key), value);
                  });
    const auto bytes = SaveTable(
        b, cache.bytes,
        [](Builder& b, const std::string& key, const TileBytes& value) {
          const auto k = b.CreateString(key);
          return fb::CreateSavedTileBytes(b, k, SaveRuns(b, value));
        });
    const auto shape_prices = SaveTable(b, cache.shape_prices, SaveOpCost);
    const auto phases = SaveTable(b, cache.phases, SaveTransfer);
    return fb::CreateSavedPriceTables(b, transfers, redistributions, placements,
                                      bytes, shape_prices, phases);
  };
  const auto scheduled = tables(*coster.cache_);
  const auto bounds = tables(*coster.bound_cache_);
  const std::string target = PackedTarget(coster.target());
  const auto fingerprint = b.CreateString(kPriceFingerprint);
  const auto target_bytes = b.CreateVector(
      reinterpret_cast<const uint8_t*>(target.data()), target.size());
  b.Finish(
      fb::CreatePriceCache(b, fingerprint, target_bytes,
                           GemmDTypeCode(coster.options()), scheduled, bounds),
      fb::PriceCacheIdentifier());
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()),
                     b.GetSize());
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
  Reader reader(coster.tiles());
  using Transfers = std::vector<std::pair<std::string, passes::TransferCost>>;
  struct Read {
    Transfers transfers, redistributions, phases;
    std::vector<std::pair<std::string, bool>> placements;
    std::vector<std::pair<std::string, TileBytes>> bytes;
    std::vector<std::pair<std::string, OpCost>> shape_prices;
  };
  auto read = [&](const fb::SavedPriceTables* s,
                  Read* r) -> std::optional<std::string> {
    if (s == nullptr) return std::nullopt;
    auto transfer = [&](const fb::SavedTransfer& t, passes::TransferCost* c) {
      return reader.Transfer(t, c);
    };
    if (auto bad = ReadTable(s->transfers(), transfer, &r->transfers)) {
      return bad;
    }
    if (auto bad =
            ReadTable(s->redistributions(), transfer, &r->redistributions)) {
      return bad;
    }
    if (auto bad = ReadTable(s->phases(), transfer, &r->phases)) return bad;
    if (auto bad = ReadTable(
            s->placements(),
            [&](const fb::SavedFlag& f, bool* v) { return reader.Flag(f, v); },
            &r->placements)) {
      return bad;
    }
    if (auto bad = ReadTable(
            s->bytes(),
            [&](const fb::SavedTileBytes& t, TileBytes* v) {
              return reader.Bytes(t, v);
            },
            &r->bytes)) {
      return bad;
    }
    return ReadTable(
        s->shape_prices(),
        [&](const fb::SavedOpCost& o, OpCost* c) { return reader.Op(o, c); },
        &r->shape_prices);
  };
  Read scheduled, bounds;
  if (auto bad = read(saved.scheduled(), &scheduled)) return bad;
  if (auto bad = read(saved.bounds(), &bounds)) return bad;
  auto add = [](Read& r, Coster::Cache& cache) {
    for (auto& [k, v] : r.transfers) cache.transfers.Add(k, std::move(v));
    for (auto& [k, v] : r.redistributions) {
      cache.redistributions.Add(k, std::move(v));
    }
    for (auto& [k, v] : r.phases) cache.phases.Add(k, std::move(v));
    for (auto& [k, v] : r.placements) cache.placements.Add(k, v);
    for (auto& [k, v] : r.bytes) cache.bytes.Add(k, std::move(v));
    for (auto& [k, v] : r.shape_prices) {
      cache.shape_prices.Add(k, std::move(v));
    }
  };
  add(scheduled, *coster.cache_);
  add(bounds, *coster.bound_cache_);
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
