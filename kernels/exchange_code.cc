// Code sizes (CodeModel, the exchange tables of a phase, a superstep's
// code) and CompleteProgram, which schedules a device program's phases and
// records its code and its repeats' address updates.

#include "kernels/exchange_schedule.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "formats/basics.h"
#include "formats/target.h"

namespace tilec::kernels {

CodeModel CodeModel::FromTarget(const fb::TargetT& t) {
  CodeModel c;
  c.runtime = t.runtime_code_bytes;
  c.per_superstep = t.code_bytes_per_superstep;
  c.per_call = t.code_bytes_per_call;
  c.per_operand = t.code_bytes_per_operand;
  c.phase = t.exchange_code_phase_bytes;
  c.send = t.exchange_code_send_bytes;
  c.long_send_words = t.exchange_code_long_send_words;
  c.long_send = t.exchange_code_long_send_bytes;
  c.receive = t.exchange_code_receive_bytes;
  c.pointer = t.exchange_code_pointer_bytes;
  c.alignment = std::max(t.exchange_code_alignment, 1);
  return c;
}

void AddExchangeCodeBytes(const CodeModel& code, const PhaseTraffic& traffic,
                          std::vector<int64_t>* per_tile) {
  if (traffic.empty()) return;
  std::vector<int64_t> phase(per_tile->size(), 0);
  for (const auto& p : traffic.packets()) {
    phase[p.sender] +=
        code.send + (p.words > code.long_send_words ? code.long_send : 0);
    for (int r : traffic.ReceiversOf(p)) phase[r] += code.receive + code.pointer;
  }
  for (size_t t = 0; t < phase.size(); ++t) {
    if (phase[t] == 0) continue;
    (*per_tile)[t] += ir::RoundUp(phase[t] + code.phase, code.alignment);
  }
}

PhaseTraffic TrafficOfStep(const ExchangeModel& model, const fb::SuperstepT& step,
                           const std::function<int64_t(uint32_t)>& address_of) {
  PhaseTraffic traffic(model);
  std::vector<int> receivers;
  std::vector<int64_t> addresses;
  for (size_t t = 0; t < step.exchange.size(); ++t) {
    const fb::TransferT& tr = *step.exchange[t];
    receivers.clear();
    addresses.clear();
    for (const auto& d : tr.destinations) {
      receivers.push_back(static_cast<int>(d->tile));
      addresses.push_back(address_of(d->buffer) + d->offset);
    }
    const int64_t rows = std::max<uint32_t>(tr.rows, 1);
    traffic.AddTransfer(static_cast<int>(tr.src_tile), receivers,
                        address_of(tr.src_buffer) + tr.src_offset, addresses,
                        tr.bytes, rows, rows > 1 ? tr.src_pitch : 0,
                        rows > 1 ? tr.dst_pitch : 0, static_cast<uint32_t>(t),
                        tr.op);
  }
  return traffic;
}

void AddSuperstepCode(const CodeModel& code, const fb::SuperstepT& step,
                      const PhaseTraffic& traffic, std::vector<int64_t>* program,
                      std::vector<int64_t>* exchange) {
  std::vector<char> takes_part(program->size(), 0);
  for (const auto& c : step.compute) {
    (*program)[c->tile] += code.CallBytes(static_cast<int64_t>(
        c->args.size() + c->params.size() + c->fparams.size()));
    takes_part[c->tile] = 1;
  }
  for (const auto& p : traffic.packets()) {
    takes_part[p.sender] = 1;
    for (int r : traffic.ReceiversOf(p)) takes_part[r] = 1;
  }
  for (size_t t = 0; t < takes_part.size(); ++t) {
    if (takes_part[t]) (*program)[t] += code.per_superstep;
  }
  AddExchangeCodeBytes(code, traffic, exchange);
}

Status CompleteProgram(const fb::TargetT& target, fb::DeviceProgramT* program) {
  const ExchangeModel model = ExchangeModel::FromTarget(target);
  const CodeModel code = CodeModel::FromTarget(target);
  std::unordered_map<uint32_t, int64_t> offsets;
  for (const auto& b : program->buffers) offsets[b->id] = b->offset;
  Status missing = Status::Ok();
  auto address_of = [&](uint32_t id) -> int64_t {
    auto it = offsets.find(id);
    if (it == offsets.end()) {
      missing = Status::BadInput("buffer #" + std::to_string(id) +
                                 " does not exist");
      return 0;
    }
    return it->second;
  };
  // A superstep no valid program could hold (a tile out of range, more
  // pieces than the target has bytes) is left as it is, for the simulator
  // to refuse by its own rules.
  auto plausible = [&](const fb::SuperstepT& step) {
    int64_t pieces = 0;
    for (const auto& tr : step.exchange) {
      if (tr->src_tile >= static_cast<uint32_t>(model.tiles)) return false;
      for (const auto& d : tr->destinations) {
        if (d->tile >= static_cast<uint32_t>(model.tiles)) return false;
      }
      pieces += tr->rows;
    }
    return pieces <= int64_t{model.tiles} * target.sram_bytes;
  };
  std::vector<int64_t> program_bytes(model.tiles, 0), exchange(model.tiles, 0);
  for (auto& step : program->supersteps) {
    if (!plausible(*step)) continue;
    const PhaseTraffic traffic = TrafficOfStep(model, *step, address_of);
    TILEC_RETURN_IF_ERROR(missing);
    if (!traffic.empty() && step->schedule == nullptr) {
      step->schedule =
          std::make_unique<fb::ExchangeScheduleT>(SchedulePhase(traffic));
    }
    AddSuperstepCode(code, *step, traffic, &program_bytes, &exchange);
  }
  program->code.clear();
  for (int t = 0; t < model.tiles; ++t) {
    const int64_t total = code.runtime + program_bytes[t] + exchange[t];
    program->code.emplace_back(
        static_cast<uint32_t>(t), static_cast<uint32_t>(code.runtime),
        static_cast<uint32_t>(program_bytes[t]),
        static_cast<uint32_t>(exchange[t]),
        static_cast<uint32_t>(ir::CodeRegionBytes(target, total)));
  }
  // Likewise a repeat outside the program or renaming unknown buffers.
  auto plausible_repeat = [&](const fb::SuperstepRepeatT& r) {
    if (int64_t{r.first} + r.count > int64_t(program->supersteps.size())) {
      return false;
    }
    for (const auto& it : r.iterations) {
      for (const fb::BufferRename& rename : it->renames) {
        if (!offsets.count(rename.from()) || !offsets.count(rename.to())) {
          return false;
        }
      }
    }
    return true;
  };
  for (size_t k = 0; k < program->repeats.size(); ++k) {
    if (!plausible_repeat(*program->repeats[k])) continue;
    auto& updates = program->repeats[k]->updates;
    updates.clear();
    for (const AddressChange& c : RepeatAddressChanges(*program, k)) {
      updates.emplace_back(c.superstep, c.tile, static_cast<uint32_t>(c.words),
                           c.one_base_serves ? fb::AddressUpdate::BaseRegister
                                             : fb::AddressUpdate::Patch);
    }
  }
  return Status::Ok();
}

int64_t AddressUpdateCycles(const fb::TargetT& target, fb::AddressUpdate method,
                            int64_t words) {
  if (words <= 0) return 0;
  if (method == fb::AddressUpdate::BaseRegister) return target.base_write_cycles;
  return target.patch_call_cycles + target.patch_word_cycles * words;
}

namespace {

// A buffer's address in an iteration, through its renames (sorted by from).
int64_t AddressIn(const fb::RepeatIterationT& iteration,
                  const std::unordered_map<uint32_t, int64_t>& offsets,
                  uint32_t id) {
  auto r = std::lower_bound(
      iteration.renames.begin(), iteration.renames.end(), id,
      [](const fb::BufferRename& x, uint32_t v) { return x.from() < v; });
  if (r != iteration.renames.end() && r->from() == id) id = r->to();
  return offsets.at(id);
}

}  // namespace

std::vector<AddressChange> RepeatAddressChanges(
    const fb::DeviceProgramT& program, size_t repeat) {
  const fb::SuperstepRepeatT& r = *program.repeats[repeat];
  std::vector<AddressChange> changes;
  if (r.iterations.size() <= 1) return changes;
  std::unordered_set<uint32_t> renamed;
  for (const auto& it : r.iterations) {
    for (const fb::BufferRename& rename : it->renames) renamed.insert(rename.from());
  }
  std::unordered_map<uint32_t, int64_t> offsets;
  for (const auto& b : program.buffers) offsets[b->id] = b->offset;
  // (superstep, tile) -> (renamed buffer -> references), first op.
  std::map<std::pair<uint32_t, uint32_t>,
           std::pair<std::map<uint32_t, int64_t>, uint32_t>>
      refs;
  auto note = [&](uint32_t s, uint32_t tile, uint32_t buffer, int64_t n,
                  uint32_t op) {
    if (!renamed.count(buffer)) return;
    auto& [words, first_op] = refs[{s, tile}];
    if (words.empty()) first_op = op;
    words[buffer] += n;
  };
  for (uint32_t s = r.first; s < r.first + r.count; ++s) {
    const fb::SuperstepT& step = *program.supersteps[s];
    for (const auto& c : step.compute) {
      for (const auto& a : c->args) note(s, c->tile, a->buffer, 1, c->op);
    }
    for (const auto& tr : step.exchange) {
      note(s, tr->src_tile, tr->src_buffer, tr->rows, tr->op);
      for (const auto& d : tr->destinations) {
        note(s, d->tile, d->buffer, tr->rows, tr->op);
      }
    }
  }
  for (const auto& [key, value] : refs) {
    const auto& [words, op] = value;
    AddressChange c;
    c.superstep = key.first;
    c.tile = key.second;
    c.op = op;
    c.one_base_serves = true;
    for (size_t i = 1; i < r.iterations.size() && c.one_base_serves; ++i) {
      std::optional<int64_t> delta;
      for (const auto& [buffer, n] : words) {
        const int64_t d = AddressIn(*r.iterations[i], offsets, buffer) -
                          AddressIn(*r.iterations[0], offsets, buffer);
        if (delta && *delta != d) c.one_base_serves = false;
        delta = d;
      }
    }
    for (const auto& [buffer, n] : words) c.words += n;
    changes.push_back(c);
  }
  return changes;
}

}  // namespace tilec::kernels
