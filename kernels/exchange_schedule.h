// Exchange as the chip runs it: the one model of an exchange phase that
// emit-device schedules with, the simulator verifies and times by, and the
// planner prices from (docs/device-program.md, "Exchange schedules").
//
// The fabric is statically timed. A phase's traffic is a set of pieces, each
// a contiguous run of bytes one tile sends to one or more receivers; a piece
// occupies the whole 32-bit words it touches and is split into packets of at
// most exchange_max_packet_words words. A packet that starts at cycle t
// (cycles from the phase's start):
//   - occupies its sender's one send lane for d = ceil(4 * words / rate)
//     cycles, [t, t + d);
//   - arrives at each receiver r in [t + L(r), t + L(r) + d), with the route
//     latency L(r) = exchange_route_latency_cycles +
//     exchange_route_latency_per_row * (r / exchange_tiles_per_row); a
//     receiver takes one source at a time, so its arrival windows never
//     overlap, and all receivers of a multicast listen to the same send;
//   - needs control instructions, which issue one at a time on each tile's
//     supervisor, shared by its sending and its receiving: a Send on the
//     sender taking effect at t, and on every receiver a Select of the
//     sender taking effect at t (L(r) before its payload) and a Pointer to
//     its destination taking effect at t + L(r), as the first word arrives.
//     An instruction taking effect at cycle c with issue width k occupies
//     the tile's issue cycles [c - k, c): a Send exchange_fragment_cycles,
//     a Select and a Pointer half of that each (rounded up, then down), so
//     every fragment costs exchange_fragment_cycles of issue at each end as
//     in the endpoint bound.
// The phase's scheduled length is the last arrival's end (a packet without
// receivers: its send's end); the simulator charges that plus sync_cycles,
// the residual measured beyond a static schedule. The endpoint bound (the
// largest of bytes sent / rate, bytes received / rate and
// exchange_fragment_cycles x fragments over the tiles) is kept beside it for
// reports: no schedule is shorter.

#ifndef TILEC_KERNELS_EXCHANGE_SCHEDULE_H_
#define TILEC_KERNELS_EXCHANGE_SCHEDULE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::kernels {

// The target's exchange and code numbers that schedules and code sizes use.
struct ExchangeModel {
  int tiles = 0;
  int bytes_per_cycle = 4;
  int fragment_cycles = 2;
  int sync_cycles = 0;
  int latency = 0;
  int latency_per_row = 0;
  int tiles_per_row = 1;
  int64_t max_packet_words = 1;

  static ExchangeModel FromTarget(const fb::TargetT& target);

  int64_t RouteLatency(int tile) const {
    return latency + int64_t{latency_per_row} * (tile / tiles_per_row);
  }
  // Cycles a lane is busy with `words` words.
  int64_t Duration(int64_t words) const {
    return (4 * words + bytes_per_cycle - 1) / bytes_per_cycle;
  }
  int IssueWidth(fb::ControlKind kind) const;
  // No phase whose busiest lane moves `bytes` is shorter than this, sync
  // included: the first Send's issue, the payload at one word a cycle, the
  // shortest route latency and the sync residual.
  int64_t PhaseLowerBound(int64_t bytes) const {
    return IssueWidth(fb::ControlKind::Send) + Duration((bytes + 3) / 4) +
           latency + sync_cycles;
  }

  bool operator==(const ExchangeModel&) const = default;
};

// One tile's term of the endpoint bound: the largest of ceil(sent / rate),
// ceil(received / rate) and fragment_cycles x fragments.
int64_t EndpointTileCycles(const ExchangeModel& model, int64_t bytes_sent,
                           int64_t bytes_received, int64_t fragments);

// The whole 32-bit words a run of `bytes` bytes starting at tile address (or
// buffer offset: buffers are word aligned) `address` touches.
int64_t WordsSpanned(int64_t address, int64_t bytes);

// One phase's traffic: pieces in the order they are added (a device
// program's transfers in order, each transfer's rows in order), each split
// into packets.
class PhaseTraffic {
 public:
  struct Packet {
    int sender = 0;
    uint32_t first_receiver = 0;  // into receivers()
    uint32_t receiver_count = 0;
    int64_t words = 0;
    uint32_t piece = 0;  // the piece it is part of
    bool operator==(const Packet&) const = default;
  };
  struct Piece {
    uint32_t transfer = 0;  // the caller's numbering (program order)
    uint32_t row = 0;
    int64_t bytes = 0;
    uint32_t op = 0;  // the op its transfer serves (orders by op)
    bool operator==(const Piece&) const = default;
  };

  explicit PhaseTraffic(const ExchangeModel& model) : model_(model) {}

  // A piece of `bytes` bytes spanning `words` words, from `sender` to
  // `receivers` (the transfer's destinations in order). Packets of at most
  // max_packet_words words carry it to each receiver once; a tile named
  // twice gets it again in packets of their own.
  void AddPiece(int sender, std::span<const int> receivers, int64_t bytes,
                int64_t words, uint32_t transfer, uint32_t row,
                uint32_t op = 0);
  // Every row of a (strided) transfer as a piece: row i of `bytes` at
  // src_address + i * src_pitch, written at each dst_addresses[d] + i *
  // dst_pitch; each piece spans the most words it touches at either end.
  void AddTransfer(int sender, std::span<const int> receivers,
                   int64_t src_address, std::span<const int64_t> dst_addresses,
                   int64_t bytes, int64_t rows, int64_t src_pitch,
                   int64_t dst_pitch, uint32_t transfer, uint32_t op = 0);

  const ExchangeModel& model() const { return model_; }
  const std::vector<Packet>& packets() const { return packets_; }
  const std::vector<Piece>& pieces() const { return pieces_; }
  std::span<const int> ReceiversOf(const Packet& p) const {
    return {receivers_.data() + p.first_receiver, p.receiver_count};
  }
  bool empty() const { return pieces_.empty(); }

  // The same pieces and packets on the same model: SchedulePhase makes the
  // same schedule of both.
  bool operator==(const PhaseTraffic& other) const;
  // 128 bits of everything operator== compares: equal traffic has equal
  // digests; two different phases have equal ones with odds of about
  // 2^-128, which is what PlannedPhaseLength's memo relies on.
  std::pair<uint64_t, uint64_t> Digest() const;

  // The endpoint bound without sync: over the tiles, the largest of
  // ceil(bytes sent / rate), ceil(bytes received / rate) and
  // fragment_cycles x pieces at that tile (each piece one fragment at its
  // sender and at each receiver).
  int64_t EndpointBound() const;

 private:
  // Whether piece `piece` names no tile of `tiles` twice.
  bool NamesDistinctTiles(uint32_t piece, std::span<const int> tiles);

  ExchangeModel model_;
  std::vector<Packet> packets_;
  std::vector<Piece> pieces_;
  // Each piece's receivers as given, followed, where it names a tile
  // twice, by the receivers of each of its rounds; packets of a piece that
  // names none twice share its receivers.
  std::vector<int> receivers_;
  std::vector<int> piece_senders_;
  std::vector<uint32_t> piece_first_receiver_;  // into receivers_
  std::vector<uint32_t> piece_receiver_count_;
  // Per tile, the last piece (+ 1) found to name it: finds a tile named
  // twice without sorting a wide multicast's receivers.
  std::vector<uint32_t> named_by_;
};

// A valid static schedule of `traffic`, made to be short: packets are placed
// one at a time at the earliest cycle their sender's lane, every receiver's
// windows and every control instruction fit around the packets already
// placed, the packets of the most loaded lanes first (a tile's lane load is
// the cycles it must send, receive or issue in the phase; a packet's
// priority is the largest load among the lanes it uses, then larger
// multicasts, then longer packets). Five orders are tried and the shortest
// schedule kept (the first of equals): by priority alone, in rounds of
// cyclic sender-to-receiver distance, the packet that can start earliest
// first (skipped on phases where it would re-place packets more than four
// times each on average), each op's packets in turn by the op's own
// priorities (phases of two or more ops: Piece::op), and colour by colour
// of an edge colouring of senders to receiver groups, each colour a round
// in which no tile sends or receives twice (skipped where receiver sets
// link so many tiles that the colours would outnumber the busiest tile's
// packets by half). Deterministic.
// receiver_unions = false searches every receiver's lanes one by one, as
// the unions kept for wide multicasts must match (tests compare them).
fb::ExchangeScheduleT SchedulePhase(const PhaseTraffic& traffic,
                                    bool receiver_unions = true);

// The schedule of `traffic` that starts packet i at starts[i] (one start
// per packet, as a schedule's `starts` holds them): every tile's control
// instructions as the rules above place them, its length and its bound.
// SchedulePhase's schedule is this of the starts it chose, so a caller that
// kept only the starts of a traffic's schedule gets the same schedule back.
fb::ExchangeScheduleT ScheduleFromStarts(const PhaseTraffic& traffic,
                                         std::vector<uint32_t> starts);

// SchedulePhase's starts alone, for a caller that needs the schedule's
// figures (FiguresOfStarts) before, or instead of, its instructions.
std::vector<uint32_t> SchedulePhaseStarts(const PhaseTraffic& traffic,
                                          bool receiver_unions = true);

// SchedulePhaseStarts' starts if that schedule is shorter than `beat`
// cycles, else nullopt: orders stop as soon as they reach `beat`, so a
// caller holding a schedule of length `beat` learns cheaply that the
// scheduler cannot beat it.
std::optional<std::vector<uint32_t>> SchedulePhaseStartsShorterThan(
    const PhaseTraffic& traffic, int64_t beat);

// ScheduleFromStarts' length and bound, and the tile of its latest control
// instruction (the lowest tile of equals; -1 without packets), without
// making the instructions.
struct ScheduleFigures {
  int64_t length = 0;
  int64_t bound = 0;
  int last_tile = -1;
};
ScheduleFigures FiguresOfStarts(const PhaseTraffic& traffic,
                                std::span<const uint32_t> starts);

// The planner's price of a phase's length (without sync): its schedule's
// for phases of at most kExactPlanningPackets packets; above that, where
// scheduling every candidate a search prices would take the planner
// minutes, the endpoint bound plus the first Send's issue and the longest
// route latency. emit-device always schedules; docs/planner.md reports
// the estimate's error. A phase of kMemoPlanningWork packet-receiver pairs
// or more is scheduled once per process and remembered by its Digest:
// the planner meets one phase under several cache keys (one broadcast for
// several consumers and grids): on the so400m model, 4.3 s of the 10.3 s
// plan-ownership spent on phases taking over 20 ms each went to phases it
// had scheduled before.
inline constexpr size_t kExactPlanningPackets = 4096;
inline constexpr int64_t kMemoPlanningWork = 16384;
int64_t PlannedPhaseLength(const PhaseTraffic& traffic);

// Checks `schedule` against `traffic` and every rule above; returns the
// schedule's length (the last arrival's end). A violation is BadInput naming
// the tile, the rule and the transfer and piece: "tile 5: receive windows
// overlap: transfer 3 piece 0 arrives over [120, 184) while transfer 9
// piece 2 arrives until 150". `where` prefixes it.
StatusOr<int64_t> VerifySchedule(const PhaseTraffic& traffic,
                                 const fb::ExchangeScheduleT& schedule,
                                 const std::string& where);

// ---------------------------------------------------------------- code
// Bytes of code each tile holds (docs/device-program.md, "Memory").

struct CodeModel {
  int64_t runtime = 0;
  int64_t per_superstep = 0;
  int64_t per_call = 0;
  int64_t per_operand = 0;
  int64_t phase = 0;
  int64_t send = 0;
  int64_t long_send_words = 0;
  int64_t long_send = 0;
  int64_t receive = 0;
  int64_t pointer = 0;
  int64_t alignment = 1;

  static CodeModel FromTarget(const fb::TargetT& target);
  // One kernel call with `operands` slices and parameters.
  int64_t CallBytes(int64_t operands) const {
    return per_call + per_operand * operands;
  }
};

// The exchange-table bytes each tile needs for one phase (tiles without a
// packet: 0): per tile, `phase` bytes, `send` per packet it sends (plus
// `long_send` above long_send_words), `receive` + `pointer` per packet it
// receives (every receive is counted as one whose address jumps: the model
// stays independent of addresses), rounded up to `alignment`. Adds into
// `per_tile` (sized to the model's tiles).
void AddExchangeCodeBytes(const CodeModel& code, const PhaseTraffic& traffic,
                          std::vector<int64_t>* per_tile);

// A device program superstep's traffic: transfer i of `step` is the
// schedule's transfer i; `address_of` gives a buffer's tile address.
PhaseTraffic TrafficOfStep(const ExchangeModel& model, const fb::SuperstepT& step,
                           const std::function<int64_t(uint32_t)>& address_of);

// One superstep's code: per tile that computes in it or takes part in its
// exchange, per_superstep bytes, plus CallBytes of each of its calls (an
// operand per slice, parameter and float parameter), into `program`; its
// exchange tables into `exchange`.
void AddSuperstepCode(const CodeModel& code, const fb::SuperstepT& step,
                      const PhaseTraffic& traffic, std::vector<int64_t>* program,
                      std::vector<int64_t>* exchange);

// For hand-made programs (tests): schedules every superstep with transfers
// and no schedule, sizes every tile's code (DeviceProgram.code) and lists
// each repeat's address updates, as emit-device does. Buffers must already
// lie above the code; BadInput when a buffer id is unknown.
Status CompleteProgram(const fb::TargetT& target, fb::DeviceProgramT* program);

// ---------------------------------------------------------------- repeats
// The cycles one tile spends before a superstep of a repeat runs again,
// changing `words` address words (docs/device-program.md, "Repeats").
int64_t AddressUpdateCycles(const fb::TargetT& target, fb::AddressUpdate method,
                            int64_t words);

// One (superstep, tile) of a repeat body whose addresses change between
// iterations: every reference to a renamed buffer is an address word (a
// compute operand; a piece's source at its sender; a piece's destination
// at each receiver), and one base register serves when, in every
// iteration, every renamed buffer it names lies the same distance from
// where iteration 0 had it.
struct AddressChange {
  uint32_t superstep = 0;
  uint32_t tile = 0;
  int64_t words = 0;
  bool one_base_serves = false;
  uint32_t op = 0;  // the first op naming a renamed buffer there
};

// Every such (superstep, tile) of program.repeats[repeat], in (superstep,
// tile) order; none for a repeat of one iteration. The program's buffers,
// supersteps and renames must already be verified (ids exist).
std::vector<AddressChange> RepeatAddressChanges(
    const fb::DeviceProgramT& program, size_t repeat);

}  // namespace tilec::kernels

#endif  // TILEC_KERNELS_EXCHANGE_SCHEDULE_H_
