// The exchange model read from a target and a phase's traffic: its pieces
// cut into packets, and the endpoint bound no schedule beats. The scheduler
// is in exchange_scheduler.cc, the verifier in exchange_verify.cc, code
// sizes and program completion in exchange_code.cc.

#include "kernels/exchange_schedule.h"

#include <algorithm>
#include <bit>
#include <map>
#include <string>
#include <vector>

#include "formats/basics.h"

namespace tilec::kernels {

ExchangeModel ExchangeModel::FromTarget(const fb::TargetT& target) {
  ExchangeModel m;
  m.tiles = target.tiles;
  m.bytes_per_cycle = std::max(target.exchange_bytes_per_cycle, 1);
  m.fragment_cycles = std::max(target.exchange_fragment_cycles, 0);
  m.sync_cycles = target.sync_cycles;
  m.latency = target.exchange_route_latency_cycles;
  m.latency_per_row = target.exchange_route_latency_per_row;
  m.tiles_per_row = std::max(target.exchange_tiles_per_row, 1);
  m.max_packet_words = std::max(target.exchange_max_packet_words, 1);
  return m;
}

int ExchangeModel::IssueWidth(fb::ControlKind kind) const {
  switch (kind) {
    case fb::ControlKind::Send:
      return fragment_cycles;
    case fb::ControlKind::Select:
      return (fragment_cycles + 1) / 2;
    case fb::ControlKind::Pointer:
      return fragment_cycles / 2;
  }
  return 0;
}

int64_t EndpointTileCycles(const ExchangeModel& model, int64_t bytes_sent,
                           int64_t bytes_received, int64_t fragments) {
  return std::max({ir::CeilDiv(bytes_sent, model.bytes_per_cycle),
                   ir::CeilDiv(bytes_received, model.bytes_per_cycle),
                   int64_t{model.fragment_cycles} * fragments});
}

int64_t WordsSpanned(int64_t address, int64_t bytes) {
  if (bytes <= 0) return 0;
  const int64_t first = address / 4;
  const int64_t last = (address + bytes - 1) / 4;
  return last - first + 1;
}

void PhaseTraffic::AddPiece(int sender, std::span<const int> receivers,
                            int64_t bytes, int64_t words, uint32_t transfer,
                            uint32_t row, uint32_t op) {
  const uint32_t piece = static_cast<uint32_t>(pieces_.size());
  pieces_.push_back({transfer, row, bytes, op});
  piece_senders_.push_back(sender);
  const uint32_t first = static_cast<uint32_t>(receivers_.size());
  piece_first_receiver_.push_back(first);
  piece_receiver_count_.push_back(static_cast<uint32_t>(receivers.size()));
  receivers_.insert(receivers_.end(), receivers.begin(), receivers.end());
  const int64_t packets =
      std::max<int64_t>(1, ir::CeilDiv(words, model_.max_packet_words));
  auto add_round = [&](uint32_t round_first, uint32_t round_size) {
    for (int64_t k = 0; k < packets; ++k) {
      Packet p;
      p.sender = sender;
      p.first_receiver = round_first;
      p.receiver_count = round_size;
      p.words = std::min(model_.max_packet_words,
                         words - k * model_.max_packet_words);
      p.piece = piece;
      packets_.push_back(p);
    }
  };
  if (NamesDistinctTiles(piece, receivers)) {
    add_round(first, static_cast<uint32_t>(receivers.size()));
    return;
  }
  // A receiver takes one source at a time: a tile named twice gets the
  // piece again, in a round of its own.
  std::vector<std::vector<int>> rounds;
  std::map<int, size_t> seen;
  for (int r : receivers) {
    const size_t k = seen[r]++;
    if (rounds.size() <= k) rounds.emplace_back();
    rounds[k].push_back(r);
  }
  for (const std::vector<int>& round : rounds) {
    const uint32_t round_first = static_cast<uint32_t>(receivers_.size());
    receivers_.insert(receivers_.end(), round.begin(), round.end());
    add_round(round_first, static_cast<uint32_t>(round.size()));
  }
}

bool PhaseTraffic::NamesDistinctTiles(uint32_t piece,
                                      std::span<const int> tiles) {
  // Few tiles (the common case): compared pairwise.
  if (tiles.size() <= 16) {
    for (size_t i = 1; i < tiles.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (tiles[i] == tiles[j]) return false;
      }
    }
    return true;
  }
  if (named_by_.empty()) named_by_.assign(model_.tiles, 0);
  for (int tile : tiles) {
    if (named_by_[tile] == piece + 1) return false;
    named_by_[tile] = piece + 1;
  }
  return true;
}

void PhaseTraffic::AddTransfer(int sender, std::span<const int> receivers,
                               int64_t src_address,
                               std::span<const int64_t> dst_addresses,
                               int64_t bytes, int64_t rows, int64_t src_pitch,
                               int64_t dst_pitch, uint32_t transfer,
                               uint32_t op) {
  for (int64_t row = 0; row < rows; ++row) {
    int64_t words = WordsSpanned(src_address + row * src_pitch, bytes);
    for (int64_t dst : dst_addresses) {
      words = std::max(words, WordsSpanned(dst + row * dst_pitch, bytes));
    }
    AddPiece(sender, receivers, bytes, words, transfer,
             static_cast<uint32_t>(row), op);
  }
}

bool PhaseTraffic::operator==(const PhaseTraffic& other) const {
  // named_by_ is scratch that the pieces determine.
  return model_ == other.model_ && packets_ == other.packets_ &&
         pieces_ == other.pieces_ && receivers_ == other.receivers_ &&
         piece_senders_ == other.piece_senders_ &&
         piece_first_receiver_ == other.piece_first_receiver_ &&
         piece_receiver_count_ == other.piece_receiver_count_;
}

std::pair<uint64_t, uint64_t> PhaseTraffic::Digest() const {
  // Two lanes with different multipliers and mixing, each finished with
  // splitmix64's avalanche; every vector's length goes in before its
  // elements, so no two different field lists feed the same words.
  uint64_t a = 0x243F6A8885A308D3u, b = 0x13198A2E03707344u;
  auto add = [&a, &b](uint64_t v) {
    a = (a ^ v) * 0x9E3779B97F4A7C15u;
    a ^= a >> 29;
    b = std::rotl(b + v, 23) * 0xC2B2AE3D27D4EB4Fu;
  };
  auto finish = [](uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9u;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBu;
    return x ^ (x >> 31);
  };
  for (int64_t v : {int64_t{model_.tiles}, int64_t{model_.bytes_per_cycle},
                    int64_t{model_.fragment_cycles},
                    int64_t{model_.sync_cycles}, int64_t{model_.latency},
                    int64_t{model_.latency_per_row},
                    int64_t{model_.tiles_per_row}, model_.max_packet_words}) {
    add(static_cast<uint64_t>(v));
  }
  add(packets_.size());
  for (const Packet& p : packets_) {
    add(static_cast<uint64_t>(p.sender));
    add(p.first_receiver);
    add(p.receiver_count);
    add(static_cast<uint64_t>(p.words));
    add(p.piece);
  }
  add(pieces_.size());
  for (const Piece& p : pieces_) {
    add(p.transfer);
    add(p.row);
    add(static_cast<uint64_t>(p.bytes));
    add(p.op);
  }
  for (const auto* ints : {&receivers_, &piece_senders_}) {
    add(ints->size());
    for (int v : *ints) add(static_cast<uint64_t>(v));
  }
  for (const auto* ints : {&piece_first_receiver_, &piece_receiver_count_}) {
    add(ints->size());
    for (uint32_t v : *ints) add(v);
  }
  return {finish(a), finish(b)};
}

int64_t PhaseTraffic::EndpointBound() const {
  if (pieces_.empty()) return 0;
  struct Load {
    int64_t sent = 0;
    int64_t received = 0;
    int64_t fragments = 0;  // none: no bytes either
  };
  std::vector<Load> load(model_.tiles);
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const int64_t bytes = pieces_[i].bytes;
    Load& sender = load[piece_senders_[i]];
    sender.sent += bytes;
    ++sender.fragments;
    const uint32_t first = piece_first_receiver_[i];
    for (uint32_t r = first; r < first + piece_receiver_count_[i]; ++r) {
      load[receivers_[r]].received += bytes;
      ++load[receivers_[r]].fragments;
    }
  }
  int64_t bound = 0;
  for (const Load& tile : load) {
    if (tile.fragments == 0) continue;
    bound = std::max(bound, EndpointTileCycles(model_, tile.sent,
                                               tile.received, tile.fragments));
  }
  return bound;
}

}  // namespace tilec::kernels
