// The simulator engine's exchange phases: each transfer checked and
// planned, no two writes of the same tile bytes, and the phase's verified
// schedule (docs/device-program.md, "Exchange schedules").

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "formats/basics.h"
#include "formats/print.h"
#include "kernels/exchange_schedule.h"
#include "sim/engine.h"

namespace tilec::sim::engine {

namespace {

// The first piece of a transfer (rows pieces of `bytes`, `pitch` apart from
// `offset`) that does not end within `buffer_bytes`, or -1 when all do.
int64_t FirstPieceOutside(int64_t offset, int64_t pitch, int64_t rows,
                          int64_t bytes, int64_t buffer_bytes) {
  if (offset + bytes > buffer_bytes) return 0;
  if (rows <= 1 || pitch == 0) return -1;
  const int64_t first = (buffer_bytes - offset - bytes) / pitch + 1;
  return first < rows ? first : -1;
}

// "bytes [a, b) are" for a single piece; "piece i of R (bytes [a, b)) is"
// for a strided transfer.
std::string PieceText(int64_t rows, int64_t piece, int64_t begin,
                      int64_t bytes) {
  const std::string range = "bytes [" + std::to_string(begin) + ", " +
                            std::to_string(begin + bytes) + ")";
  if (rows <= 1) return range + " are";
  return "piece " + std::to_string(piece) + " of " + std::to_string(rows) +
         " (" + range + ") is";
}

// Sets bits [begin, end) of `bits`; true if any of them was set already.
bool TestAndSet(std::vector<uint64_t>& bits, int64_t begin, int64_t end) {
  const int64_t w0 = begin >> 6, w1 = (end - 1) >> 6;
  const uint64_t m0 = ~uint64_t{0} << (begin & 63);
  const uint64_t m1 = ~uint64_t{0} >> (63 - ((end - 1) & 63));
  if (w0 == w1) {
    const uint64_t m = m0 & m1;
    const bool hit = (bits[w0] & m) != 0;
    bits[w0] |= m;
    return hit;
  }
  bool hit = (bits[w0] & m0) != 0;
  bits[w0] |= m0;
  for (int64_t w = w0 + 1; w < w1; ++w) {
    hit = hit || bits[w] != 0;
    bits[w] = ~uint64_t{0};
  }
  hit = hit || (bits[w1] & m1) != 0;
  bits[w1] |= m1;
  return hit;
}

// One destination of one transfer: `rows` pieces from `addr` on `tile`.
struct TransferWrite {
  int tile;
  int64_t addr;  // of piece 0
  int transfer, destination;
  uint32_t buffer;
};

// The message for two writes of the same tile bytes. writes[begin, ...) are
// one tile's writes in program order, and piece `hit_piece` of
// writes[hit_write] is the first piece that found a byte written before:
// it is named with the earliest piece before it that it overlaps. Pieces are
// walked, never collected, so a transfer of 2^31 rows costs no memory.
Status OverlapError(int s, const fb::SuperstepT& step, const StepPlan& plan,
                    const std::vector<TransferWrite>& writes, size_t begin,
                    size_t hit_write, int64_t hit_piece) {
  const TransferWrite& second = writes[hit_write];
  const TransferPlan& second_plan = plan.transfers[second.transfer];
  const int64_t b0 = second.addr + hit_piece * second_plan.dst_pitch;
  const int64_t b1 = b0 + second_plan.bytes;
  for (size_t w = begin; w <= hit_write; ++w) {
    const TransferWrite& first = writes[w];
    const TransferPlan& tp = plan.transfers[first.transfer];
    const int64_t pieces = w == hit_write ? hit_piece : tp.rows;
    for (int64_t i = 0; i < pieces; ++i) {
      const int64_t a0 = first.addr + i * tp.dst_pitch;
      const int64_t a1 = a0 + tp.bytes;
      if (a1 <= b0 || b1 <= a0) continue;
      const fb::TransferT& tr = *step.exchange[second.transfer];
      const fb::TransferT& tr1 = *step.exchange[first.transfer];
      std::string message =
          StepWhere(s, second.tile, tr.op) + " transfer " +
          std::to_string(second.transfer) + " destination " +
          std::to_string(second.destination) +
          (tr.rows > 1 ? " piece " + std::to_string(hit_piece) : "") + " " +
          BufferText(second.buffer) + ": writes tile bytes [" +
          std::to_string(std::max(a0, b0)) + ", " +
          std::to_string(std::min(a1, b1)) + ") that ";
      if (w == hit_write) {
        message += "its piece " + std::to_string(i) +
                   " also writes (dst_pitch " + std::to_string(tr.dst_pitch) +
                   " is less than the " + std::to_string(tr.bytes) +
                   " bytes of a piece)";
      } else {
        message += "transfer " + std::to_string(first.transfer) +
                   (tr1.rows > 1 ? " piece " + std::to_string(i) : "") +
                   " (op " + std::to_string(tr1.op) + ") also writes " +
                   "through " + BufferText(first.buffer);
      }
      return Status::BadInput(message);
    }
  }
  return Status::Internal("superstep " + std::to_string(s) +
                          ": overlapping writes not found again");
}

// The writes of one checked transfer, one per destination, in destination
// order.
void AppendWrites(int t, const TransferPlan& tp,
                  std::vector<TransferWrite>* writes) {
  for (size_t d = 0; d < tp.destinations.size(); ++d) {
    const TransferPlan::Destination& dst = tp.destinations[d];
    writes->push_back({dst.tile, dst.addr, t, static_cast<int>(d),
                       tp.transfer->destinations[d]->buffer});
  }
}

// Marks the bytes of writes[begin, end) (one tile's writes) in `bits`,
// stopping at the first piece that finds a byte marked already; true if one
// did, with that piece in *hit_write and *hit_piece. Leaves `bits` clear
// for the next tile.
bool MarkTileWrites(const StepPlan& plan,
                    const std::vector<TransferWrite>& writes, size_t begin,
                    size_t end, int64_t tensor_bytes,
                    std::vector<uint64_t>& bits, size_t* hit_write,
                    int64_t* hit_piece) {
  bool overlap = false;
  int64_t low = tensor_bytes, high = 0;
  for (size_t w = begin; w < end && !overlap; ++w) {
    const TransferPlan& tp = plan.transfers[writes[w].transfer];
    for (int64_t i = 0; i < tp.rows && !overlap; ++i) {
      const int64_t a = writes[w].addr + i * tp.dst_pitch;
      overlap = TestAndSet(bits, a, a + tp.bytes);
      low = std::min(low, a);
      high = std::max(high, a + tp.bytes);
      *hit_write = w;
      *hit_piece = i;
    }
  }
  if (high > low) {
    std::fill(bits.begin() + (low >> 6), bits.begin() + ((high + 63) >> 6), 0);
  }
  return overlap;
}

// Two writes of the same tile bytes (two transfers, two destinations of a
// multicast, or two pieces of one destination, through any buffers, which
// may alias) would make the result depend on transfer order. Tile by tile,
// every piece marks its bytes in a bitmap; a tile where a piece finds a
// byte marked is then searched piece by piece to name the pair.
Status CheckOverlappingWrites(int s, const fb::SuperstepT& step,
                              const StepPlan& plan, int64_t tensor_bytes,
                              std::vector<TransferWrite> writes) {
  std::stable_sort(
      writes.begin(), writes.end(),
      [](const TransferWrite& a, const TransferWrite& b) {
        return a.tile < b.tile;
      });
  std::vector<uint64_t> bits(
      static_cast<size_t>(ir::CeilDiv(tensor_bytes, 64)), 0);
  for (size_t begin = 0; begin < writes.size();) {
    size_t end = begin;
    while (end < writes.size() && writes[end].tile == writes[begin].tile) ++end;
    size_t hit_write = 0;
    int64_t hit_piece = 0;
    if (MarkTileWrites(plan, writes, begin, end, tensor_bytes, bits,
                       &hit_write, &hit_piece)) {
      return OverlapError(s, step, plan, writes, begin, hit_write, hit_piece);
    }
    begin = end;
  }
  return Status::Ok();
}

}  // namespace

Status Engine::CheckTransfers(int s) {
  const fb::SuperstepT& step = *program_->supersteps[s];
  StepPlan& plan = steps_[s];
  // Every destination of every transfer (each `rows` pieces), to find two
  // writes of the same bytes.
  std::vector<TransferWrite> writes;
  for (size_t t = 0; t < step.exchange.size(); ++t) {
    TransferPlan tp;
    TILEC_RETURN_IF_ERROR(CheckTransfer(s, static_cast<int>(t), &tp));
    AppendWrites(static_cast<int>(t), tp, &writes);
    plan.transfers.push_back(std::move(tp));
  }
  TILEC_RETURN_IF_ERROR(
      CheckOverlappingWrites(s, step, plan, sram_bytes_, std::move(writes)));
  return CheckSchedule(s);
}

namespace {

// Per tile that takes part, where its part of the phase ends: its last
// send's end or its last arrival's end.
std::vector<std::pair<int, int64_t>> TileEnds(
    const kernels::PhaseTraffic& traffic, const fb::ExchangeScheduleT& schedule) {
  const kernels::ExchangeModel& model = traffic.model();
  std::map<int, int64_t> ends;
  for (size_t p = 0; p < traffic.packets().size(); ++p) {
    const auto& packet = traffic.packets()[p];
    const int64_t end = schedule.starts[p] + model.Duration(packet.words);
    int64_t& own = ends[packet.sender];
    own = std::max(own, end);
    for (int r : traffic.ReceiversOf(packet)) {
      int64_t& e = ends[r];
      e = std::max(e, end + model.RouteLatency(r));
    }
  }
  return {ends.begin(), ends.end()};
}

}  // namespace

// The phase's traffic as the schedule sees it: every row of every transfer,
// in program order, over the words it touches at the source and at every
// destination.
kernels::PhaseTraffic Engine::TrafficOf(int s) const {
  return kernels::TrafficOfStep(
      exchange_model_, *program_->supersteps[s],
      [&](uint32_t id) -> int64_t { return FindBuffer(id)->buffer->offset; });
}

// Verifies superstep s's exchange schedule (once: renames change no tile or
// size) and keeps what the costs and the code check need.
Status Engine::CheckSchedule(int s) {
  StepPlan& plan = steps_[s];
  const fb::SuperstepT& step = *program_->supersteps[s];
  if (plan.transfers.empty() || schedules_[s].checked) return Status::Ok();
  const std::string where = "superstep " + std::to_string(s) +
                            " exchange schedule";
  if (step.schedule == nullptr) {
    return Status::BadInput(
        where + ": missing (a program written before exchange schedules, "
                "schema 3: re-run emit-device)");
  }
  // Every piece is at least one packet: refuse a schedule that cannot
  // cover the transfers before expanding them.
  int64_t pieces = 0;
  for (const TransferPlan& tp : plan.transfers) pieces += tp.rows;
  if (pieces > static_cast<int64_t>(step.schedule->starts.size())) {
    return Status::BadInput(where + ": starts " +
                            std::to_string(step.schedule->starts.size()) +
                            " packets, the transfers have " +
                            std::to_string(pieces) + " pieces");
  }
  const kernels::PhaseTraffic traffic = TrafficOf(s);
  kernels::StatusOr<int64_t> length =
      kernels::VerifySchedule(traffic, *step.schedule, where);
  if (!length.ok()) return length.status();
  StepSchedule& done = schedules_[s];
  done.checked = true;
  done.scheduled = *length;
  done.bound = traffic.EndpointBound();
  if (static_cast<int64_t>(step.schedule->bound) != done.bound) {
    return Status::BadInput(where + ": records an endpoint bound of " +
                            std::to_string(step.schedule->bound) +
                            ", the transfers' is " +
                            std::to_string(done.bound));
  }
  done.tile_end = TileEnds(traffic, *step.schedule);
  return Status::Ok();
}


Status Engine::CheckTransfer(int s, int t, TransferPlan* tp) {
  const fb::TransferT* tr = program_->supersteps[s]->exchange[t].get();
  if (tr == nullptr) {
    return Status::BadInput("superstep " + std::to_string(s) + " transfer " +
                            std::to_string(t) + " is null");
  }
  const TransferWhere where{s, t, tr};
  const BufferInfo* src = nullptr;
  TILEC_RETURN_IF_ERROR(CheckTransferSource(where, *tr, &src));
  TILEC_RETURN_IF_ERROR(PlanTransferPieces(where, *tr, *src, tp));
  for (size_t d = 0; d < tr->destinations.size(); ++d) {
    TILEC_RETURN_IF_ERROR(
        CheckTransferDestination(where, *tr, static_cast<int>(d), *src, tp));
  }
  return Status::Ok();
}

Status Engine::CheckTransferSource(const TransferWhere& where,
                                   const fb::TransferT& tr,
                                   const BufferInfo** src) {
  if (tr.src_tile >= static_cast<uint32_t>(tiles_)) {
    return Status::BadInput(where() +
                            ": source tile out of range (target has " +
                            std::to_string(tiles_) + " tiles)");
  }
  *src = FindBuffer(tr.src_buffer);
  auto src_text = [&] { return "source " + BufferText(tr.src_buffer); };
  if (*src == nullptr) {
    return Status::BadInput(where() + ": " + src_text() + " does not exist");
  }
  if ((*src)->buffer->tile != tr.src_tile) {
    return Status::BadInput(where() + ": " + src_text() + " lives on tile " +
                            std::to_string((*src)->buffer->tile));
  }
  return Status::Ok();
}

Status Engine::PlanTransferPieces(const TransferWhere& where,
                                  const fb::TransferT& tr,
                                  const BufferInfo& src, TransferPlan* tp) {
  auto src_text = [&] { return "source " + BufferText(tr.src_buffer); };
  if (tr.bytes == 0) {
    return Status::BadInput(where() + ": " + src_text() +
                            ": transfer of 0 bytes");
  }
  if (tr.rows == 0) {
    return Status::BadInput(where() + ": " + src_text() +
                            ": transfer of 0 rows");
  }
  const int64_t rows = tr.rows;
  const int64_t bytes = tr.bytes;
  // With one piece the pitches mean nothing.
  const int64_t src_pitch = rows > 1 ? tr.src_pitch : 0;
  const int64_t dst_pitch = rows > 1 ? tr.dst_pitch : 0;
  const int64_t src_out = FirstPieceOutside(tr.src_offset, src_pitch, rows,
                                            bytes, src.buffer->bytes);
  if (src_out >= 0) {
    return Status::BadInput(where() + ": " + src_text() + ": " +
                            PieceText(rows, src_out,
                                      tr.src_offset + src_out * src_pitch,
                                      bytes) +
                            " outside the buffer's " +
                            std::to_string(src.buffer->bytes) + " bytes");
  }
  kernels::StatusOr<DType> dtype = kernels::DTypeFromFb(tr.dtype);
  if (!dtype.ok() || *dtype != src.dtype) {
    return Status::BadInput(
        where() + ": " + src_text() + ": transfer dtype " +
        ir::DTypeText(tr.dtype) + " differs from the buffer's " +
        ir::DTypeText(src.buffer->dtype, src.buffer->fp8_scale_exp));
  }
  if (tr.src_offset % src.element_bytes != 0 ||
      tr.bytes % src.element_bytes != 0) {
    return Status::BadInput(where() + ": " + src_text() + ": offset " +
                            std::to_string(tr.src_offset) + " or bytes " +
                            std::to_string(tr.bytes) +
                            " is not a whole number of elements");
  }
  // Destinations have the source's dtype (checked with each destination),
  // so one element size serves both pitches.
  if (src_pitch % src.element_bytes != 0 ||
      dst_pitch % src.element_bytes != 0) {
    return Status::BadInput(where() + ": " + src_text() + ": src_pitch " +
                            std::to_string(src_pitch) + " or dst_pitch " +
                            std::to_string(dst_pitch) +
                            " is not a whole number of elements");
  }
  if (tr.destinations.empty()) {
    return Status::BadInput(where() + ": " + src_text() + ": no destinations");
  }
  tp->transfer = &tr;
  tp->src_addr = int64_t{src.buffer->offset} + tr.src_offset;
  tp->bytes = bytes;
  tp->rows = rows;
  tp->src_pitch = src_pitch;
  tp->dst_pitch = dst_pitch;
  return Status::Ok();
}

Status Engine::CheckTransferDestination(const TransferWhere& where,
                                        const fb::TransferT& tr, int d,
                                        const BufferInfo& src,
                                        TransferPlan* tp) {
  const fb::DestinationT* dst = tr.destinations[d].get();
  if (dst == nullptr) {
    return Status::BadInput(where() + ": destination " + std::to_string(d) +
                            " is null");
  }
  auto dwhere = [&] {
    return where() + ": destination " + std::to_string(d) + " tile " +
           std::to_string(dst->tile) + " " + BufferText(dst->buffer);
  };
  if (dst->tile >= static_cast<uint32_t>(tiles_)) {
    return Status::BadInput(dwhere() + ": tile out of range (target has " +
                            std::to_string(tiles_) + " tiles)");
  }
  if (dst->tile == tr.src_tile) {
    return Status::BadInput(
        dwhere() + ": a transfer to its own source tile (use the copy kernel)");
  }
  const BufferInfo* db = FindBuffer(dst->buffer);
  if (db == nullptr) return Status::BadInput(dwhere() + " does not exist");
  if (db->buffer->tile != dst->tile) {
    return Status::BadInput(dwhere() + " lives on tile " +
                            std::to_string(db->buffer->tile));
  }
  const int64_t dst_out = FirstPieceOutside(dst->offset, tp->dst_pitch,
                                            tp->rows, tp->bytes,
                                            db->buffer->bytes);
  if (dst_out >= 0) {
    return Status::BadInput(
        dwhere() + ": " +
        PieceText(tp->rows, dst_out, dst->offset + dst_out * tp->dst_pitch,
                  tp->bytes) +
        " outside the buffer's " + std::to_string(db->buffer->bytes) +
        " bytes");
  }
  if (db->dtype != src.dtype || db->scale_exp != src.scale_exp) {
    return Status::BadInput(
        dwhere() + ": buffer is " +
        ir::DTypeText(db->buffer->dtype, db->buffer->fp8_scale_exp) +
        " but source " + BufferText(tr.src_buffer) + " is " +
        ir::DTypeText(src.buffer->dtype, src.buffer->fp8_scale_exp));
  }
  if (dst->offset % db->element_bytes != 0) {
    return Status::BadInput(dwhere() + ": offset " +
                            std::to_string(dst->offset) +
                            " is not a whole number of elements");
  }
  tp->destinations.push_back(
      {static_cast<int>(dst->tile), int64_t{db->buffer->offset} + dst->offset});
  return Status::Ok();
}

}  // namespace tilec::sim::engine
