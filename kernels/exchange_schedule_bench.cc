// The exchange scheduler's host time on phases of the shapes that cost the
// planner most on the so400m model (ipu21's exchange numbers): a vector
// that every tile of a GEMM grid row holds, broadcast by each of its owners
// to all the grid's tiles but itself (3-word packets to 1,151 receivers
// from 479 senders, 1-word ones from 288), and a wide broadcast from few
// senders with several packets each (receiver sets that packets share). For each phase: the planner's
// price (PlannedPhaseLength) and emit-device's recorded schedule
// (SchedulePhase) with their host CPU seconds, checked by VerifySchedule; with
// --each, also the schedule searched receiver by receiver (no unions),
// which must give the same starts.
// Usage: exchange_schedule_bench [--each]

#include <ctime>
#include <cstdio>
#include <cstring>
#include <vector>

#include "formats/ir.h"
#include "kernels/exchange_schedule.h"

namespace tilec::kernels {
namespace {

struct Broadcast {
  const char* name;
  int senders;          // tiles [0, senders) send
  int grid;             // to tiles [0, grid), each but itself
  int packets;          // per sender
  int64_t words;        // per packet
};

// Host CPU seconds of the process (every thread): wall time on a shared
// machine says little.
double CpuSeconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

int Run(bool each) {
  fb::TargetT target;
  if (Status s = ir::LoadTarget("ipu21", &target); !s.ok()) {
    std::fprintf(stderr, "exchange_schedule_bench: %s\n", s.message().c_str());
    return 1;
  }
  const ExchangeModel model = ExchangeModel::FromTarget(target);
  const Broadcast phases[] = {
      {"479 senders x 3 words to 1,151 tiles", 479, 1152, 1, 3},
      {"288 senders x 1 word to 1,151 tiles", 288, 1152, 1, 1},
      {"24 senders x 16 x 64 words to 1,471 tiles", 24, 1472, 16, 64},
  };
  int failures = 0;
  for (const Broadcast& b : phases) {
    PhaseTraffic traffic(model);
    uint32_t transfer = 0;
    for (int s = 0; s < b.senders; ++s) {
      std::vector<int> receivers;
      for (int t = 0; t < b.grid; ++t) {
        if (t != s) receivers.push_back(t);
      }
      for (int k = 0; k < b.packets; ++k) {
        traffic.AddPiece(s, receivers, 4 * b.words, b.words, transfer++, 0);
      }
    }
    double start = CpuSeconds();
    const int64_t planned = PlannedPhaseLength(traffic);
    const double plan_s = CpuSeconds() - start;
    start = CpuSeconds();
    const fb::ExchangeScheduleT schedule = SchedulePhase(traffic);
    const double schedule_s = CpuSeconds() - start;
    StatusOr<int64_t> verified = VerifySchedule(traffic, schedule, b.name);
    std::printf(
        "exchange: %s: planned %lld cycles in %.3f s CPU, scheduled %u cycles "
        "(bound %u) in %.3f s CPU, %s\n",
        b.name, static_cast<long long>(planned), plan_s, schedule.length,
        schedule.bound, schedule_s,
        verified.ok() ? "verified" : verified.status().message().c_str());
    failures += !verified.ok();
    if (!each) continue;
    start = CpuSeconds();
    const fb::ExchangeScheduleT by_receiver = SchedulePhase(traffic, false);
    const bool same = by_receiver.starts == schedule.starts;
    std::printf("exchange: %s: receiver by receiver in %.3f s CPU, %s\n", b.name,
                CpuSeconds() - start, same ? "same starts" : "DIFFERENT starts");
    failures += !same;
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tilec::kernels

int main(int argc, char** argv) {
  const bool each = argc > 1 && std::strcmp(argv[1], "--each") == 0;
  return tilec::kernels::Run(each);
}
