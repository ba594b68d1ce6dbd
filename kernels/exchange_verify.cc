// VerifySchedule: a schedule checked against its traffic and every rule
// of the exchange model.

#include "kernels/exchange_schedule.h"

#include <algorithm>
#include <span>
#include <string>
#include <vector>


namespace tilec::kernels {
namespace {

std::string PieceText(const PhaseTraffic& traffic, uint32_t packet) {
  const PhaseTraffic::Piece& piece =
      traffic.pieces()[traffic.packets()[packet].piece];
  return "transfer " + std::to_string(piece.transfer) + " piece " +
         std::to_string(piece.row);
}

// Where each packet sits in the schedule, for the checks.
struct Window {
  int64_t begin = 0;
  int64_t end = 0;
  uint32_t packet = 0;
};

Status CheckDisjoint(std::vector<Window>& windows, const PhaseTraffic& traffic,
                     const std::string& where, int tile, const char* what) {
  std::sort(windows.begin(), windows.end(),
            [](const Window& a, const Window& b) {
              return a.begin != b.begin ? a.begin < b.begin
                                        : a.packet < b.packet;
            });
  for (size_t i = 1; i < windows.size(); ++i) {
    const Window& a = windows[i - 1];
    const Window& b = windows[i];
    if (b.begin < a.end) {
      return Status::BadInput(
          where + "tile " + std::to_string(tile) + ": " + what + ": " +
          PieceText(traffic, b.packet) + " over [" + std::to_string(b.begin) +
          ", " + std::to_string(b.end) + ") while " +
          PieceText(traffic, a.packet) + " runs until " +
          std::to_string(a.end));
    }
  }
  return Status::Ok();
}

// What the verifier expects of each packet's instructions.
struct Expected {
  bool send = false;
  std::vector<uint8_t> select, pointer;  // per receiver
};

// The schedule has one start per packet, and lanes (if any) for each,
// all ordinary.
Status CheckPacketCounts(const PhaseTraffic& traffic,
                         const fb::ExchangeScheduleT& schedule,
                         const std::string& where) {
  const auto& packets = traffic.packets();
  if (schedule.starts.size() != packets.size()) {
    return Status::BadInput(where + "the schedule starts " +
                            std::to_string(schedule.starts.size()) +
                            " packets, the transfers make " +
                            std::to_string(packets.size()));
  }
  if (!schedule.lanes.empty() && schedule.lanes.size() != packets.size()) {
    return Status::BadInput(where + "the schedule has " +
                            std::to_string(schedule.lanes.size()) +
                            " lanes for " + std::to_string(packets.size()) +
                            " packets");
  }
  for (size_t p = 0; p < schedule.lanes.size(); ++p) {
    if (schedule.lanes[p] != fb::ExchangeLane::Ordinary) {
      return Status::BadInput(where + PieceText(traffic, p) +
                              ": paired (64-bit) sends are not supported");
    }
  }
  return Status::Ok();
}

// Each tile's instructions: known tiles in order, issue one at a time,
// each naming its packet's sender or one of its receivers. Records in
// `seen_out` which instructions each packet has.
Status CheckTilePrograms(const PhaseTraffic& traffic,
                         const fb::ExchangeScheduleT& schedule,
                         const std::string& where,
                         std::vector<Expected>* seen_out) {
  const ExchangeModel& model = traffic.model();
  const auto& packets = traffic.packets();
  std::vector<Expected>& seen = *seen_out;
  seen.resize(packets.size());
  for (size_t p = 0; p < packets.size(); ++p) {
    seen[p].select.assign(packets[p].receiver_count, 0);
    seen[p].pointer.assign(packets[p].receiver_count, 0);
  }
  int last_tile = -1;
  for (const auto& tc : schedule.tiles) {
    if (tc == nullptr) return Status::BadInput(where + "a null tile program");
    const int tile = static_cast<int>(tc->tile);
    const std::string at = where + "tile " + std::to_string(tc->tile) + ": ";
    if (tc->tile >= static_cast<uint32_t>(model.tiles) || tile <= last_tile) {
      return Status::BadInput(at + "tile programs must name tiles of the "
                              "target in ascending order, each once");
    }
    last_tile = tile;
    int64_t issued_until = 0;
    for (const fb::ControlInstruction& ins : tc->instructions) {
      if (ins.kind() > fb::ControlKind::MAX) {
        return Status::BadInput(at + "an unknown control instruction");
      }
      const int64_t width = model.IssueWidth(ins.kind());
      if (ins.packet() >= packets.size()) {
        return Status::BadInput(at + "an instruction names packet " +
                                std::to_string(ins.packet()) + " of " +
                                std::to_string(packets.size()));
      }
      const auto& packet = packets[ins.packet()];
      // Built only for a message: the checks pass on every instruction of
      // a valid program, and the text cost a fifth of --execute=false.
      auto what = [&] {
        return at + std::string(fb::EnumNameControlKind(ins.kind())) +
               " of " + PieceText(traffic, ins.packet()) + " at cycle " +
               std::to_string(ins.cycle());
      };
      if (int64_t{ins.cycle()} - width < issued_until) {
        return Status::BadInput(
            what() + ": control instructions issue one at a time: it needs "
                   "issue cycles [" +
            std::to_string(int64_t{ins.cycle()} - width) + ", " +
            std::to_string(ins.cycle()) + ") but the tile issues until " +
            std::to_string(issued_until));
      }
      issued_until = ins.cycle();
      const int64_t start = schedule.starts[ins.packet()];
      if (ins.kind() == fb::ControlKind::Send) {
        if (packet.sender != tile || seen[ins.packet()].send) {
          return Status::BadInput(what() + ": a packet has one Send, on its "
                                         "sender (tile " +
                                  std::to_string(packet.sender) + ")");
        }
        if (ins.cycle() != start) {
          return Status::BadInput(what() + ": a Send takes effect as the "
                                         "packet starts, at cycle " +
                                  std::to_string(start));
        }
        seen[ins.packet()].send = true;
        continue;
      }
      const std::span<const int> receivers = traffic.ReceiversOf(packet);
      if (ins.destination() >= receivers.size() ||
          receivers[ins.destination()] != tile) {
        return Status::BadInput(what() + ": names destination " +
                                std::to_string(ins.destination()) +
                                ", which is not this tile");
      }
      const bool select = ins.kind() == fb::ControlKind::Select;
      uint8_t& done = select ? seen[ins.packet()].select[ins.destination()]
                             : seen[ins.packet()].pointer[ins.destination()];
      const int64_t due = select ? start : start + model.RouteLatency(tile);
      if (done) {
        return Status::BadInput(what() + ": a receiver has one " +
                                (select ? "Select" : "Pointer") +
                                " per packet");
      }
      if (ins.cycle() != due) {
        return Status::BadInput(
            what() + (select ? ": every receiver of a multicast selects its "
                             "source as the packet starts, at cycle "
                           : ": the pointer is set as the first word "
                             "arrives (route latency " +
                                 std::to_string(model.RouteLatency(tile)) +
                                 "), at cycle ") +
            std::to_string(due));
      }
      done = 1;
    }
  }
  return Status::Ok();
}

// Every packet's instructions are there; one send lane per tile and one
// source at a time at each receiver. Sets `length_out` to the last
// arrival's end.
Status CheckWindows(const PhaseTraffic& traffic,
                    const fb::ExchangeScheduleT& schedule,
                    const std::string& where,
                    const std::vector<Expected>& seen, int64_t* length_out) {
  const ExchangeModel& model = traffic.model();
  const auto& packets = traffic.packets();
  std::vector<std::vector<Window>> sends(model.tiles), arrivals(model.tiles);
  int64_t length = 0;
  for (size_t p = 0; p < packets.size(); ++p) {
    const auto& packet = packets[p];
    auto what = [&] { return where + PieceText(traffic, p) + ": "; };
    if (!seen[p].send) return Status::BadInput(what() + "no Send");
    const std::span<const int> receivers = traffic.ReceiversOf(packet);
    for (size_t i = 0; i < receivers.size(); ++i) {
      if (!seen[p].select[i] || !seen[p].pointer[i]) {
        return Status::BadInput(what() + "receiver tile " +
                                std::to_string(receivers[i]) +
                                " has no " +
                                (seen[p].select[i] ? "Pointer" : "Select"));
      }
    }
    const int64_t start = schedule.starts[p];
    const int64_t d = model.Duration(packet.words);
    sends[packet.sender].push_back({start, start + d, static_cast<uint32_t>(p)});
    length = std::max(length, start + d);
    for (int r : receivers) {
      const int64_t arrival = start + model.RouteLatency(r);
      arrivals[r].push_back({arrival, arrival + d, static_cast<uint32_t>(p)});
      length = std::max(length, arrival + d);
    }
  }
  for (int tile = 0; tile < model.tiles; ++tile) {
    TILEC_RETURN_IF_ERROR(CheckDisjoint(sends[tile], traffic, where, tile,
                                        "one send lane: sends overlap"));
    TILEC_RETURN_IF_ERROR(
        CheckDisjoint(arrivals[tile], traffic, where, tile,
                      "one source at a time: receive windows overlap"));
  }
  *length_out = length;
  return Status::Ok();
}

}  // namespace

StatusOr<int64_t> VerifySchedule(const PhaseTraffic& traffic,
                                 const fb::ExchangeScheduleT& schedule,
                                 const std::string& where_in) {
  const std::string where = where_in.empty() ? "" : where_in + ": ";
  TILEC_RETURN_IF_ERROR(CheckPacketCounts(traffic, schedule, where));
  std::vector<Expected> seen;
  TILEC_RETURN_IF_ERROR(CheckTilePrograms(traffic, schedule, where, &seen));
  int64_t length = 0;
  TILEC_RETURN_IF_ERROR(CheckWindows(traffic, schedule, where, seen, &length));
  if (int64_t{schedule.length} != length) {
    return Status::BadInput(where + "the schedule claims " +
                            std::to_string(schedule.length) +
                            " cycles; its last word arrives at " +
                            std::to_string(length));
  }
  return length;
}

}  // namespace tilec::kernels
