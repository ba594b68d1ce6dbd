#include "passes/lower/transfers.h"

#include <algorithm>
#include <utility>

namespace tilec::lower {
namespace {

// Offset of the last piece.
int64_t LastPiece(int64_t first, int64_t rows, int64_t pitch) {
  return first + (rows - 1) * pitch;
}

// Whether a piece of `t`'s source starts at `offset`.
bool HoldsPiece(const VTransfer& t, int64_t offset) {
  if (t.rows == 1) return offset == t.src.offset;
  const int64_t d = offset - t.src.offset;
  return d >= 0 && d % t.src_pitch == 0 && d / t.src_pitch < t.rows;
}

// Whether `t` and `run` (same source buffer and piece size) share a piece.
bool SharePiece(const VTransfer& t, const StridedRun& run) {
  const int64_t t_last = LastPiece(t.src.offset, t.rows, t.src_pitch);
  const int64_t r_last = LastPiece(run.src, run.rows, run.src_pitch);
  if (t_last < run.src || r_last < t.src.offset) return false;
  if (t.rows > 1 && run.rows > 1 && t.src_pitch == run.src_pitch) {
    const int64_t diff = run.src - t.src.offset;
    if (diff % run.src_pitch != 0) return false;
    const int64_t d = diff / run.src_pitch;  // run's piece j is t's j + d
    return std::max<int64_t>(0, d) < std::min(t.rows, run.rows + d);
  }
  if (run.rows <= t.rows) {
    for (int64_t i = 0; i < run.rows; ++i) {
      if (HoldsPiece(t, run.src + i * run.src_pitch)) return true;
    }
    return false;
  }
  for (int64_t i = 0; i < t.rows; ++i) {
    const int64_t x = t.src.offset + i * t.src_pitch;
    const int64_t d = x - run.src;
    if (d >= 0 && d % run.src_pitch == 0 && d / run.src_pitch < run.rows) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::vector<StridedRun> GroupRuns(std::span<const Run> runs,
                                  int element_bytes) {
  std::vector<StridedRun> out;
  for (const Run& r : runs) {
    const int64_t src = r.src * element_bytes, dst = r.dst * element_bytes;
    const int64_t bytes = r.count * element_bytes;
    if (!out.empty() && out.back().bytes == bytes) {
      StridedRun& g = out.back();
      const int64_t ds = src - LastPiece(g.src, g.rows, g.src_pitch);
      const int64_t dd = dst - LastPiece(g.dst, g.rows, g.dst_pitch);
      const bool extends = g.rows == 1 ? ds >= bytes && dd >= bytes
                                       : ds == g.src_pitch && dd == g.dst_pitch;
      if (extends) {
        g.src_pitch = ds;
        g.dst_pitch = dd;
        ++g.rows;
        continue;
      }
    }
    out.push_back({src, dst, bytes, 1, 0, 0});
  }
  return out;
}

void TransferBuilder::Add(Phase* phase, int src_tile, int src_buffer,
                          const StridedRun& run, int dst_tile, int dst_buffer,
                          fb::DType dtype, uint32_t op) {
  std::vector<VTransfer>& list = phase->transfers;
  VTransfer like;
  like.src_tile = src_tile;
  like.src = {src_buffer, run.src, run.bytes};
  like.dtype = dtype;
  like.op = op;
  const VDestination dst{dst_tile, dst_buffer, run.dst};
  // The whole run as a transfer of its own.
  auto add_transfer = [&] {
    like.rows = run.rows;
    like.src_pitch = run.src_pitch;
    like.dst_pitch = run.dst_pitch;
    like.destinations.push_back(dst);
    list.push_back(std::move(like));
  };
  if (phase->unicast) {
    add_transfer();
    return;
  }
  Source& source = sources_[{phase, src_tile, src_buffer, run.bytes}];
  if (run.rows == 1) {
    AddPiece(phase, &source, like, run.src, dst);
    return;
  }
  auto same = source.strided.find({run.src, run.rows, run.src_pitch});
  if (same != source.strided.end() &&
      list[same->second].dst_pitch == run.dst_pitch) {
    list[same->second].destinations.push_back(dst);
    return;
  }
  // Transfers that already send some of these pieces, grouped otherwise.
  std::vector<size_t> sharing;
  bool single_shared = false;
  for (auto it = source.singles.lower_bound(run.src);
       it != source.singles.end() &&
       it->first <= LastPiece(run.src, run.rows, run.src_pitch);
       ++it) {
    if ((it->first - run.src) % run.src_pitch == 0) {
      single_shared = true;
      break;
    }
  }
  for (const auto& [key, index] : source.strided) {
    if (SharePiece(list[index], run)) sharing.push_back(index);
  }
  if (!single_shared && sharing.empty()) {
    source.strided[{run.src, run.rows, run.src_pitch}] = list.size();
    add_transfer();
    return;
  }
  // Piece by piece, as one-piece transfers would have merged.
  for (size_t index : sharing) Split(phase, &source, index);
  for (int64_t i = 0; i < run.rows; ++i) {
    AddPiece(phase, &source, like, run.src + i * run.src_pitch,
             {dst_tile, dst_buffer, run.dst + i * run.dst_pitch});
  }
}

void TransferBuilder::AddPiece(Phase* phase, Source* source,
                               const VTransfer& like, int64_t src,
                               const VDestination& dst) {
  std::vector<VTransfer>& list = phase->transfers;
  auto it = source->singles.find(src);
  if (it == source->singles.end()) {
    for (const auto& [key, index] : source->strided) {
      if (HoldsPiece(list[index], src)) {
        Split(phase, source, index);
        break;
      }
    }
    it = source->singles.find(src);
  }
  if (it != source->singles.end()) {
    list[it->second].destinations.push_back(dst);
    return;
  }
  VTransfer t = like;
  t.src.offset = src;
  t.rows = 1;
  t.src_pitch = t.dst_pitch = 0;
  t.destinations = {dst};
  source->singles[src] = list.size();
  list.push_back(std::move(t));
}

void TransferBuilder::Split(Phase* phase, Source* source, size_t index) {
  std::vector<VTransfer>& list = phase->transfers;
  const VTransfer whole = list[index];
  source->strided.erase({whole.src.offset, whole.rows, whole.src_pitch});
  ++split_transfers_;
  for (int64_t i = 0; i < whole.rows; ++i) {
    VTransfer piece = whole;
    piece.src.offset += i * whole.src_pitch;
    for (VDestination& d : piece.destinations) d.offset += i * whole.dst_pitch;
    piece.rows = 1;
    piece.src_pitch = piece.dst_pitch = 0;
    if (i == 0) {
      source->singles[piece.src.offset] = index;
      list[index] = std::move(piece);
    } else {
      source->singles[piece.src.offset] = list.size();
      list.push_back(std::move(piece));
    }
  }
}

void CompactTransfers(std::vector<VTransfer>* transfers) {
  std::vector<VTransfer>& list = *transfers;
  size_t kept = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    if (kept > 0) {
      VTransfer& a = list[kept - 1];
      const VTransfer& b = list[i];
      bool joins = a.src_tile == b.src_tile && a.src.buffer == b.src.buffer &&
                   a.src.bytes == b.src.bytes && a.dtype == b.dtype &&
                   a.op == b.op && !a.destinations.empty() &&
                   a.destinations.size() == b.destinations.size();
      const int64_t bytes = a.src.bytes;
      const int64_t ds =
          b.src.offset - LastPiece(a.src.offset, a.rows, a.src_pitch);
      // The pitches of the joined transfer, where a or b fixes them.
      const int64_t src_pitch = a.rows > 1 ? a.src_pitch : ds;
      joins = joins && ds == src_pitch && ds >= bytes &&
              (b.rows == 1 || b.src_pitch == src_pitch);
      int64_t dst_pitch = a.rows > 1 ? a.dst_pitch : -1;
      for (size_t d = 0; joins && d < a.destinations.size(); ++d) {
        const VDestination& x = a.destinations[d];
        const VDestination& y = b.destinations[d];
        const int64_t dd = y.offset - LastPiece(x.offset, a.rows, a.dst_pitch);
        if (dst_pitch < 0) dst_pitch = dd;
        joins = x.tile == y.tile && x.buffer == y.buffer && dd == dst_pitch &&
                dd >= bytes;
      }
      joins = joins && (b.rows == 1 || b.dst_pitch == dst_pitch);
      if (joins) {
        a.src_pitch = src_pitch;
        a.dst_pitch = dst_pitch;
        a.rows += b.rows;
        continue;
      }
    }
    if (kept != i) list[kept] = std::move(list[i]);
    ++kept;
  }
  list.resize(kept);
}

}  // namespace tilec::lower
